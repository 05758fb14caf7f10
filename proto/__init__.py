"""gRPC messages of the controller listener (Raft and the controller service) and their stubs."""

# the largest gRPC message either side of the controller listener sends or accepts (gRPC's default
# receive limit is 4 MiB: a CreateTopics within Kafka's limits can be larger)
MAX_GRPC_MESSAGE = 64 * 1024 * 1024
