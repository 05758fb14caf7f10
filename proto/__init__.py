"""gRPC messages of the controller listener (Raft and the controller service) and their stubs."""

# the largest gRPC message either side of the controller listener sends or accepts (gRPC's default
# receive limit is 4 MiB: a CreateTopics within Kafka's limits can be larger)
MAX_GRPC_MESSAGE = 64 * 1024 * 1024

# Options of every channel to the controller listener (raft/transport.py, the brokers'
# broker/controller_channel.py). gRPC's own reconnect backoff starts at 1 s and grows 1.6x per
# failed attempt up to 120 s, and while it waits every call fails at once: a broker whose
# controller was down for 10 s got its first heartbeat through 3-3.6 s after that controller
# came back and became active, past a 3 s broker.session.timeout.ms, so the new active controller
# fenced it although it was heartbeating all along. Kafka's clients reconnect within
# reconnect.backoff.max.ms (1 s); these reconnect within 0.5 s, and an attempt to a host that
# drops packets gives up as soon (the connect timeout is at least the minimum backoff).
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE),
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE),
)
