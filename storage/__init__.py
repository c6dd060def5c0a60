"""Warren's storage: metadata (SQLAlchemy) and message store (queue files).

Knows nothing of AMQP I/O and never imports `broker`.
"""
