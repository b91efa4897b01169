"""The host launcher: the `python start_services.py` command line, settings, hardware
detection, the compose plan and the Docker adapter. Runs on the host only."""
