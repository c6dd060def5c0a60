"""A small application under test for docs/testing.md's worked example: a Celery app
whose task confirms an order and announces it on the `orders` topic exchange."""
