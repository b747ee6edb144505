"""Who a client is: TLS and mTLS for listeners and the upstream connection, with Kafka's principal
mapping rules (``tls``); SASL terminated at the proxy (``sasl``) with its users file (``users``) and OAUTHBEARER
tokens validated against a JWKS (``oauthbearer``); SASL inspected on its way to the cluster (``sasl_inspect``); the
mechanisms' messages, both sides (``sasl_messages``). What a principal may do: Kafka's ACLs and their decisions
(``acls``), the ACL file (``acl_file``) and the ACLs in force, the file's and the ACL APIs' (``acl_service``), asked
with the proxy's own topics as one question (``access``).

May import: proxy.decision, proxy.files, protocol, allocator.
"""
