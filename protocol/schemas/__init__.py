"""Kafka message schemas kafka-python does not ship, in Kafka's own JSON format."""
