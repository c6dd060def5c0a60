"""The metadata store tests of tests/unit/test_metadata.py, on SQLite and PostgreSQL.

PostgreSQL comes from the `postgres_server` fixture (tests/support/postgres_support.py): a
throwaway server started once per session (initdb + pg_ctl on a free loopback port) with
a fresh database per test. A missing server or driver makes these tests fail, never skip.
"""

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.warren_only(
    "Warren's metadata store on SQLite and PostgreSQL: no broker involved")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
import test_metadata  # noqa: E402  (the shared tests; pytest imports it by this name)


class TestMetadataStoreOnSQLiteAndPostgres(test_metadata.TestMetadataStore):
    """Every test of TestMetadataStore, once per backend."""

    @pytest.fixture(params=["sqlite", "postgresql"])
    def target(self, request, tmp_path):
        if request.param == "sqlite":
            yield test_metadata.StoreTarget(url=None, data_dir=str(tmp_path))
            return
        server = request.getfixturevalue("postgres_server")
        with server.database() as url:
            yield test_metadata.StoreTarget(url=url, data_dir=str(tmp_path))
