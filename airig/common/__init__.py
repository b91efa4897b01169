"""What both sides share: the host launcher and the containers (brain, workers,
provisioners, services). Imports nothing else of airig."""
