"""Test hooks: what a test broker answers on its control socket besides the admin
operations (`warren serve --testing`, or the in-process test broker of broker/testing):
a vhost and user per test, inspection, waits, fault injection and virtual time. Off in
a production broker; nothing here runs unless they are switched on."""
