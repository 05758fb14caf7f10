"""``krafty mirror``: MirrorMaker 2's replication between clusters (seed 003's mirroring: "the
mirror cluster simply acts as a consumer of the source cluster"), with MM2's config keys, topic
naming, internal topics and record formats. Pure decision logic in ``policy``, ``plan``,
``offsets``, ``formats`` and ``config``; the confluent-kafka shells in ``replicator``, ``topics``,
``checkpoints`` and ``runner``."""
