"""What a handler decides about one request, and who asked.

``Outcome`` (forward, forward a replacement, answer locally, throttle, close after the answer) and
``Caller`` (principal, the instant read once per request, the broker reached) are the contract
between the connection engine, which carries decisions out, and the rooms that make them (handlers,
the SASL login); ``interception`` is the one interface through which the engine asks for them. Nothing here
touches a socket.

May import: protocol.
"""
