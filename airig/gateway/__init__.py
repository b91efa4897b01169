"""The escalation gateway: the one service that holds the external provider's
API key and the one that talks to the outside.

The brain sends it ``POST /v1/complete`` with a shared bearer token (never the key); it
calls the provider through the official client (``openai`` or ``anthropic``) with the
clients' own retries off (the brain retries with backoff), and answers with the text and
the token usage, or with a 502 saying whether a retry may help. Runs in its container
(03-agents, profile ``escalation``); imports only ``airig.common``.
"""
