"""librdkafka settings for a production Kafka with TLS and SASL. The user and password come from
the topology config (``conf``), not from this file."""


def kafka_conf(conf: dict) -> dict:
    return {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": conf["kafka.user"], "sasl.password": conf["kafka.password"],
            "ssl.ca.location": "/etc/ssl/certs/kafka-ca.pem"}
