"""The PySpark job turning the proxy's usage log into reports and recommended quotas."""
