"""The connection engine: one client connection and its upstream connection (``client``), made of objects with one job
each: reading requests and carrying out what was decided on each, holding back and cutting through (``requests``);
pairing responses with their requests, finishing and throttling them as decided (``responses``); its link to the
cluster (``upstream_link``); the login gate (``login``); the mute, as Kafka's ``ChannelMuteState`` (``mute``); the
requests awaiting answers, in order (``in_flight``); the rest of a large frame passing through as it arrives
(``passage``); reading paused for a set of reasons (``flow``); what each side is sent (``outbox``); splicing
(``splice``); why a connection closed (``close_reason``); how much a read takes (``reading``). It names no API.
What it needs from the server that accepted it is a protocol (``context``), and what decides on its requests one
interface (``proxy.decision.interception``): the engine never imports a handler.

May import: proxy.decision, proxy.cluster, proxy.security, proxy.settings, proxy.reporting, protocol, quotas (the name
of the principal of a connection that names none, ``ANONYMOUS``; no quota and no quota time).
"""
