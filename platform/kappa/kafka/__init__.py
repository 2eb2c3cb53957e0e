"""Kafka: the local KRaft broker, topic administration and offsets."""
