"""RabbitMQ's list parameters (broker/server/management/listing.py) on a list longer
than one chunk: the answer streamed in chunks is the same JSON as in one piece."""

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from broker.server.management import listing
from broker.server.management.errors import ApiError, api_error_response

ITEMS = [{"name": f"q{index:05d}", "messages": index % 7, "arguments": {"k": "v"}}
         for index in range(2 * listing.CHUNK_ITEMS + 3)]


@pytest.fixture
def client():
    async def items(request):
        return listing.listed(request, list(ITEMS))

    app = Starlette(routes=[Route("/items", items)],
                    exception_handlers={ApiError: api_error_response})
    with TestClient(app, backend="trio") as client:
        yield client


def test_a_long_list_streamed_in_chunks_is_the_whole_list(client):
    response = client.get("/items")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == ITEMS


def test_sort_and_columns_apply_to_a_long_list(client):
    answer = client.get("/items", params={"sort": "messages", "sort_reverse": "true",
                                          "columns": "name,messages"}).json()
    assert len(answer) == len(ITEMS)
    assert answer[0] == {"name": "q00006", "messages": 6}
    assert [entry["messages"] for entry in answer] == sorted(
        (item["messages"] for item in ITEMS), reverse=True)


def test_a_page_of_a_long_list_filtered_by_name(client):
    answer = client.get("/items", params={"page": "2", "page_size": "500",
                                          "name": "q00"}).json()
    assert (answer["page"], answer["page_count"], answer["item_count"],
            answer["filtered_count"], answer["total_count"]) == (2, 2, 500, 1000, 1003)
    assert answer["items"][0]["name"] == "q00500"
    beyond = client.get("/items", params={"page": "3", "page_size": "500", "name": "q00"})
    assert beyond.status_code == 400
    assert beyond.json()["error"] == "page_out_of_range"
