"""The operator's files as the proxy reads them: TOML with errors that name the file and the key,
and noticing that a file changed (quota file, users file, certificates) so it is read again; and the documents of the
state directory the proxy replaces whole (``state_document``).

May import: allocator (a file written durably).
"""
