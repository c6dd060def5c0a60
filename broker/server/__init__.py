"""The trio shell around the core: sockets, timers, signals."""
