"""Every request's decisions in one ordered chain (``chain``: ApiVersions, the login, the API's handler, the
request rate), and one handler per Kafka API the proxy decides on, beside each other: Produce (``produce``), Fetch
(``fetch``), ShareFetch (``share_fetch``), CreateTopics, DeleteTopics and CreatePartitions (``topic_mutations``),
InitProducerId and AllocateProducerIds (``producer_ids``), AlterClientQuotas and DescribeClientQuotas
(``client_quotas``), ApiVersions (``api_versions``), and, with topics a client may not use (the proxy's own, and with
the authorizer those Kafka's ACLs do not allow), the APIs that could reach them (``refused_topics``); with the
authorizer, the APIs it does not judge yet kept for super users (``authorization``). How each API is charged is one
table (``charges``). A handler reads the request, asks the quota engines and the ACLs, and returns a decision
(``proxy.decision``); it never touches the connection, which carries the decision out. APIs without a handler pass
through as bytes.

May import: proxy.decision, proxy.producer_ids, proxy.cluster, proxy.settings, proxy.security, proxy.reporting,
proxy.state, protocol, quotas, allocator.
"""
