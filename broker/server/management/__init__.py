"""The management listener: RabbitMQ's management HTTP API (JSON, the same paths, fields
and status codes), the Prometheus metrics and the web UI, served on the broker's trio
loop by hypercorn (docs/operations.md).

Handlers run on the event loop between AMQP frames: they read broker state (never
mutating queues) and change it only through broker/core/admin.py's Administration and the
vhost's declare/bind/delete operations, each of which records its journal entry; a
write's reply is sent once the metadata store has it (`ManagementContext.commit`).
"""
