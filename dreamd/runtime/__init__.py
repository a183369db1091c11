"""Running dreamd: the daemon, its schedule, systemd notify, the instance lock, logging."""
