"""Entry point of the init containers: ``python -m airig.provision <service>``."""

from airig.provision.runner import app

if __name__ == "__main__":
    app(prog_name="python -m airig.provision")
