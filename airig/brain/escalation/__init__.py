"""The external tier: which tasks the brain hands over (``criteria``), what it sends
(``handoff``), what it does with the reply (``reply``), the durable ledger of calls and the
budget arithmetic (``ledger``, ``budget``), the gateway client (``client``) and the thread
that sends (``sender``). The external tier advises the brain: it never reaches a worker.
"""
