"""Handler of Fetch (consumers and follower replicas): fetch sessions (KIP-227), long polls,
reads sent with sendfile, preferred read replicas (KIP-392)."""

from __future__ import annotations

import asyncio
import logging

from broker.apis import wire
from broker.fetch_session import FetchContext
from broker.log import legacy
from broker.log.validator import in_pool
from broker.replica.selector import candidates_for
from broker.security.authorizer import ANONYMOUS
from broker.security.quotas import FETCH, user_of
from broker.server import FileRegion
from common.errors import ErrorCode, KafkaError
from metadata.acl import AclOperation as Op
from metadata.acl import ResourceType as RT

# A high watermark that only advanced ends a follower's long poll this much later, unless records
# come first (see FetchApis._wait_for_news)
FOLLOWER_HW_DELAY_S = 0.05

log = logging.getLogger("krafty.apis")


class FetchApis:
    """Mixin of KafkaApis (broker/apis/kafka_apis.py)."""

    # --- Fetch ---------------------------------------------------------------------------------
    async def fetch(self, ctx, body, ver):
        req = wire.parse_fetch(body, ver)  # (hand-written: every follower's every fetch comes here)
        image = self.image
        replica_id = req.replica_id
        deadline = self.clock.monotonic() + req.max_wait_ms / 1000
        # KIP-227: the request may name only what changed in a fetch session; the context
        # gives every partition to read (keyed by topic id from v13, by name before)
        requested = [((t.topic_id if ver >= 13 else t.topic, p.partition), p) for t in req.topics for p in t.partitions]
        if ver >= 7:
            forgotten = [(t.topic_id if ver >= 13 else t.topic, int(pid))
                         for t in req.forgotten_topics_data for pid in t.partitions]
            # a session's partitions are watched (the replica manager's news): an incremental
            # request reads those it names and those that moved, not every one (but with a leader
            # replication throttle, whose "nothing this time" is not news, it reads them all)
            fctx = self.fetch_sessions.context(req.session_id, req.session_epoch, requested, forgotten,
                                               self.clock.monotonic_ms(), replica_id >= 0,
                                               tracked=not self.replicas.leader_quota.enabled)
            if fctx.error:
                return wire.encode_fetch_response(ver, [], error=fctx.error)
            if fctx.session is not None:
                fctx.session.replica_id = replica_id
        else:
            fctx = FetchContext(parts=requested)
        watch = fctx.session is not None and not self.replicas.leader_quota.enabled
        reading = dict(fctx.parts)
        wanted, denied = self._fetch_plan(ctx, ver, reading, replica_id, image)
        # a response carries at most fetch.max.bytes (Kafka's cap, followers' too: a client asking
        # for 2 GiB would have the broker build it), and a consumer with a fetch quota at most its
        # quota over the window
        bytes_cap = self.config["fetch.max.bytes"]
        if replica_id < 0 and image.client_quotas:
            self.quotas.update(image.client_quotas)
            quota_cap = self.quotas.max_bytes_in_window(FETCH, user_of(getattr(ctx, "principal", ANONYMOUS)),
                                                        ctx.header.client_id or "")
            if quota_cap is not None:
                bytes_cap = min(bytes_cap, quota_cap)
        first_pass = True
        while True:
            more = [] if watch else None
            topics_out, total, errors = self._fetch_once(ver, wanted, req, replica_id, first_pass, image, denied,
                                                         bytes_cap, more)
            first_pass = False
            left = deadline - self.clock.monotonic()
            if total >= min(req.min_bytes, bytes_cap) or errors or left <= 0 or not (wanted or fctx.tracked):
                break
            hw_news = False
            if replica_id >= 0 and fctx.session is not None:
                keyed = [(((tid if ver >= 13 else name), r.index), r) for name, tid, out in topics_out for r in out]
                if any(fctx.has_news(k, None, r.log_start_offset) for k, r in keyed):
                    break  # a follower learns a new log start now (DeleteRecords waits for it)
                hw_news = any(fctx.has_news(k, r.high_watermark, r.log_start_offset) for k, r in keyed)
                if hw_news and (self.replica_selector is not None or fctx.session.hw_due):
                    break  # a new high watermark: at once with a replica selector (consumers read
                    # from followers, KIP-392), else with the next records or FOLLOWER_HW_DELAY_S later
            if fctx.tracked:
                if not fctx.session.dirty:
                    await ctx.park(self._wait_for_news(fctx.session, left, hw_news))
                news = fctx.take_news()
                if news:
                    reading.update(news)
                    wanted, denied = self._fetch_plan(ctx, ver, reading, replica_id, image)
                continue
            await ctx.park(self.replicas.wait_for_data(
                [(name, p.partition) for name, _, _, ps in wanted if name for p in ps], left, log_end=replica_id >= 0))
        throttle = 0
        if replica_id < 0 and self.image.client_quotas:
            throttle = await self._throttle(ctx, FETCH, total, ver >= 8)
            if throttle:  # over quota: an empty response (Kafka's getThrottledResponse)
                self.quotas.unrecord(FETCH, user_of(getattr(ctx, "principal", ANONYMOUS)), ctx.header.client_id or "",
                                     total, self.clock.monotonic())
                for _, _, parts in topics_out:
                    for pr in parts:
                        pr.records = None
        if fctx.session is not None:
            keyed = {((tid if ver >= 13 else name), r.index): r for name, tid, out in topics_out for r in out}
            chosen = fctx.select({k: (r.error, r.high_watermark, r.log_start_offset, r.records is not None,
                                      r.diverging_epoch is not None or r.preferred_read_replica >= 0
                                      or r.current_leader is not None) for k, r in keyed.items()})
            topics_out = [(name, tid, kept) for name, tid, out in topics_out
                          if (kept := [r for r in out if ((tid if ver >= 13 else name), r.index) in chosen])]
            if watch:
                # what was read is watched from now on; what may still hold something the fetcher
                # has not got (an error, records sent or left for lack of room) is read again
                keep = [k for k, r in keyed.items() if r.error or r.records is not None
                        or r.diverging_epoch is not None or r.preferred_read_replica >= 0
                        or r.current_leader is not None] + more
                session, sessions, parts = fctx.session, self.fetch_sessions, self.replicas.partitions
                for name, tid, _timg, ps in wanted:
                    tkey = tid if ver >= 13 else name
                    for pd in ps:
                        key, tp = (tkey, pd.partition), (name, pd.partition)
                        sessions.watch(session, key, tp if name else None)
                        if replica_id >= 0 and (part := parts.get(tp)) is not None and replica_id not in part.state.isr:
                            keep.append(key)  # each fetch may put it back in the ISR (retried until it is)
                fctx.keep(keep)
        if self.metrics is not None:
            self.metrics.fetched(ctx, topics_out, replica_id)
        if ver <= 3:
            await self._down_convert(ver, topics_out, {(name, pd.partition): pd.fetch_offset
                                                       for name, _tid, _timg, pds in wanted for pd in pds})
        return wire.encode_fetch_response(ver, topics_out, throttle_ms=throttle, session_id=fctx.session_id)

    def _fetch_plan(self, ctx, ver, reading: dict, replica_id: int, image):
        """The partitions to read, by topic, resolved against the image: ``[(name, topic id,
        topic image, [partition data])]``, and the topics the principal may not read."""
        by_topic: dict = {}
        for (tkey, _), pd in reading.items():
            by_topic.setdefault(tkey, []).append(pd)
        wanted = []
        for tkey, parts in by_topic.items():
            if ver >= 13:
                timg = image.topics_by_id.get(tkey)
                name = timg.name if timg else None
                tid = tkey
            else:
                name = tkey
                timg = image.topics_by_name.get(name)
                tid = timg.topic_id if timg else None
            wanted.append((name, tid, timg, parts))
        # replicas need CLUSTER_ACTION on the cluster, consumers READ on each topic
        denied: frozenset[str | None] = frozenset()
        if self.authorizer is not None:
            if replica_id >= 0:
                if not self.authorize_cluster(ctx, Op.CLUSTER_ACTION):
                    denied = frozenset(w[0] for w in wanted)
            else:
                denied = frozenset(w[0] for w in wanted if w[0] is not None
                                   and not self.authorize(ctx, Op.READ, RT.TOPIC, w[0]))
        return wanted, denied

    async def _wait_for_news(self, session, timeout_s: float, pending_hw: bool = False) -> None:
        """A long poll of a watched session: until one of its partitions moves (``touch``), the
        session ends, or the timeout. A follower's poll told that a high watermark only advanced
        (``on_hw_news``) ends FOLLOWER_HW_DELAY_S later, unless records come first: the next
        append of a busy partition carries the watermark in the same round (Kafka's follower
        fetch waits for records alone, up to replica.fetch.wait.max.ms; a transaction's six
        appends cost it a fetch round each instead of two), and an idle follower still learns it
        within the delay, not a whole long poll later. ``pending_hw``: such a watermark is pending
        already (this very fetch moved it)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def news() -> None:
            if not fut.done():
                fut.set_result(None)

        def hw_due() -> None:
            session.hw_due = True
            news()

        def hw_news() -> None:
            nonlocal timer
            if not fut.done() and timer.when() - loop.time() > FOLLOWER_HW_DELAY_S:
                timer.cancel()
                timer = loop.call_later(FOLLOWER_HW_DELAY_S, hw_due)

        session.hw_due = False
        timer = loop.call_later(timeout_s, news)
        session.on_news, session.on_hw_news = news, hw_news
        if pending_hw:
            hw_news()
        try:
            await fut
        finally:
            timer.cancel()
            if session.on_news is news:
                session.on_news = session.on_hw_news = None

    def _partition_news(self, tp, wake_followers: bool = True) -> None:
        """The replica manager's news of a partition (its log end, high watermark, log start or
        leadership moved): the fetch sessions watching it read it at their next request; the
        long polls of followers' sessions end at once only if ``wake_followers`` or with a
        replica selector (consumers reading from followers learn the watermark at once,
        KIP-392); for a high watermark that only advanced, FOLLOWER_HW_DELAY_S later unless
        records come first (Kafka's follower fetch waits for records alone since KAFKA-9731). A
        follower whose session held it idle until now (at our log end as of its last read) was
        caught up at its last fetch, as the fetch would have recorded had it read the partition."""
        fresh = self.fetch_sessions.touch(tp, wake_followers or self.replica_selector is not None)
        if fresh:
            part = self.replicas.partitions.get(tp)
            if part is not None and part.state.is_leader:
                for s in fresh:
                    if s.replica_id >= 0:
                        part.state.idle_follower_fetched(s.replica_id, s.last_used_ms)

    def _fetch_once(self, ver, wanted, req, replica_id, first_pass, image, denied=frozenset(), max_bytes_cap=None,
                    more: list | None = None):
        """One read of every partition in ``wanted``. ``more``: gets the keys of partitions that
        hold more than this read returned for their fetcher (to be read again next time)."""
        # KIP-392: consumers (Fetch v11+) may read from followers, up to their high watermark,
        # and the leader may point a consumer with a rack at an in-sync replica in that rack
        from_consumer = replica_id < 0
        follower_reads = from_consumer and ver >= 11
        client_rack = (req.rack_id or None) if follower_reads else None
        selector = self.replica_selector if client_rack else None
        read_committed = from_consumer and ver >= 4 and req.isolation_level == 1  # (v0-3 read uncommitted)
        remaining = req.max_bytes if ver >= 3 and req.max_bytes > 0 else 0x7FFFFFFF  # (v0-2: per partition only)
        if max_bytes_cap is not None:
            remaining = min(remaining, max_bytes_cap)
        total = 0
        errors = False
        topics_out = []
        for name, tid, timg, parts in wanted:
            out = []
            for p in parts:
                r = wire.FetchPartitionResult(p.partition, 0, -1, -1, -1, None)
                out.append(r)
                throttled = False
                part = None
                try:
                    if name in denied:
                        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    if timg is None or p.partition not in timg.partitions:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID if ver >= 13 else
                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    part = self.replicas.partitions.get((name, p.partition))
                    if part is None:
                        raise self.replicas.missing_error((name, p.partition), ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    if not (part.state.is_leader or (
                            follower_reads and part.state.leader >= 0 and self.broker_id in part.state.replicas)):
                        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    st, lg = part.state, part.log
                    if replica_id >= 0:
                        v = st.validate_follower_fetch(
                            p.current_leader_epoch if ver >= 9 else -1, p.fetch_offset,
                            p.last_fetched_epoch if ver >= 12 else -1, lg.leader_epoch_cache, lg.log_start_offset,
                            lg.log_end_offset)
                        if v.error != ErrorCode.NONE:
                            raise KafkaError(v.error)
                        if v.diverging_epoch is not None:
                            r.diverging_epoch = v.diverging_epoch
                            r.high_watermark = st.high_watermark
                            r.last_stable_offset = lg.last_stable_offset(st.high_watermark)
                            r.log_start_offset = lg.log_start_offset
                            errors = True  # answer at once
                            continue
                        if first_pass:
                            self.replicas.on_follower_fetch(part, replica_id, p.fetch_offset,
                                                            p.log_start_offset if ver >= 5 else -1)
                        max_offset = lg.log_end_offset
                        quota = self.replicas.leader_quota
                        if quota.enabled and self.replicas.throttled(quota, (name, p.partition),
                                                                     replica_id in st.isr):
                            throttled = True  # a reassignment's new replica (leader.replication.throttled.*)
                            if quota.is_exceeded(self.clock.monotonic()):
                                max_offset = -1  # nothing this time: answered with the watermarks only
                    else:
                        if ver >= 9:
                            bad = st.check_leader_epoch(p.current_leader_epoch)
                            if bad:
                                raise KafkaError(ErrorCode[bad])
                        max_offset = min(st.high_watermark, lg.log_end_offset)
                        if selector is not None and st.is_leader:
                            preferred = self._preferred_read_replica(selector, client_rack, st, lg, image,
                                                                     p.fetch_offset)
                            if preferred is not None:
                                r.preferred_read_replica = preferred
                                r.high_watermark = st.high_watermark
                                r.last_stable_offset = lg.last_stable_offset(st.high_watermark)
                                r.log_start_offset = lg.log_start_offset
                                errors = True  # answer at once, without records
                                continue
                    r.high_watermark = st.high_watermark
                    r.last_stable_offset = lso = lg.last_stable_offset(st.high_watermark)
                    r.log_start_offset = lg.log_start_offset
                    if p.fetch_offset < lg.log_start_offset or p.fetch_offset > lg.log_end_offset:
                        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                    if read_committed:
                        max_offset = min(max_offset, lso)  # nothing of an undecided transaction
                        r.aborted = []
                    if max_offset < 0:
                        continue
                    if more is not None and p.fetch_offset < max_offset:
                        more.append(((tid if ver >= 13 else name), p.partition))
                    limit = min(p.partition_max_bytes, remaining)
                    if ver <= 3:  # magic 0/1: converted from what is read here, below (_down_convert)
                        self._check_down_conversion(lg.config, from_consumer)
                    elif ver < 10 and lg.config.compression_type == "zstd":  # as Kafka: zstd came with v10
                        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                         "zstd-compressed topics need Fetch v10 or later")
                    sl = lg.read(p.fetch_offset, limit, max_offset, min_one_batch=(total == 0))
                    if sl is not None and sl.size > 0:
                        r.records = FileRegion(sl.fd, sl.position, sl.size, sl.file)
                        total += sl.size
                        remaining -= sl.size
                        if read_committed and lg.has_aborted_transactions(p.fetch_offset):
                            # the client drops the records of these (KIP-98): the bytes stay zero-copy
                            r.aborted = [(t.producer_id, t.first_offset) for t in lg.aborted_transactions(
                                p.fetch_offset, lg.fetch_upper_bound(sl))]
                        if throttled:
                            self.replicas.leader_quota.record(sl.size, self.clock.monotonic())
                except (OSError, KafkaError) as e:
                    if part is not None:
                        try:
                            self.replicas.io_error(part, e)  # a failed log dir: KAFKA_STORAGE_ERROR
                        except KafkaError as storage:
                            e = storage
                    if not isinstance(e, KafkaError):
                        raise
                    r.error = e.code
                    if e.code == ErrorCode.KAFKA_STORAGE_ERROR and ver <= 5:
                        r.error = ErrorCode.NOT_LEADER_OR_FOLLOWER  # Kafka: clients before v6 do not retry the former
                    errors = True
                    if e.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH) and timg:
                        reg = timg.partitions.get(p.partition)
                        if reg is not None:
                            r.current_leader = (reg.leader, reg.leader_epoch)
            topics_out.append((name or "", tid, out))
        return topics_out, total, errors

    @staticmethod
    def _check_down_conversion(config, from_consumer: bool) -> None:
        """Fetch v0-3 reads magic 0/1 messages: as Kafka 3.x, UNSUPPORTED_VERSION for a consumer
        when the topic's message.downconversion.enable is false, and UNSUPPORTED_COMPRESSION_TYPE
        on a zstd topic (no legacy form)."""
        if from_consumer and not config.message_downconversion_enable:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "message format conversion is disabled for this topic "
                             "(message.downconversion.enable=false): use Fetch v4 or later")
        if config.compression_type == "zstd":
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd-compressed topics need Fetch v10 or later")

    async def _down_convert(self, ver: int, topics_out, fetch_offsets: dict) -> None:
        """Fetch v0-3 (broker/log/legacy.py): each partition's file region, read as for a newer
        version, becomes magic 0 (v0-1) or 1 (v2-3) messages, in the validation pool: at most as
        many bytes as the region (Kafka's LazyDownConversionRecords sizes its response so), unless
        the first converted batch alone is larger. Sizes and quotas counted the region, as Kafka
        counts before conversion."""
        magic = legacy.fetch_magic(ver)
        for name, _tid, parts in topics_out:
            for r in parts:
                region = r.records
                if not isinstance(region, FileRegion):
                    continue
                part = self.replicas.partitions.get((name, r.index))
                max_message_bytes = part.log.config.max_message_bytes if part is not None else None
                try:
                    r.records = await in_pool(legacy.down_convert_region, region.fd, region.offset, region.size,
                                              magic, fetch_offsets[(name, r.index)], max_message_bytes) or None
                except KafkaError as e:
                    r.records, r.error = None, e.code
                except OSError as e:
                    r.records = None
                    r.error = ErrorCode.NOT_LEADER_OR_FOLLOWER  # (KAFKA_STORAGE_ERROR before Fetch v6)
                    log.error("%s-%d: reading for a Fetch v%d failed: %s", name, r.index, ver, e)

    def _preferred_read_replica(self, selector, client_rack, st, lg, image, fetch_offset) -> int | None:
        """The in-sync replica the selector prefers for this consumer, if it is not us."""
        racks = {b.id: b.rack for b in image.brokers.values() if not b.fenced}
        leader, cands = candidates_for(fetch_offset, st.isr, st.follower_end_offsets, racks, self.broker_id,
                                       lg.log_end_offset)
        chosen = selector.select(client_rack, leader, cands)
        if chosen == self.broker_id or chosen < 0:
            return None
        log.debug("%s-%d: consumer in rack %s at offset %d -> preferred read replica %d", st.topic, st.partition,
                  client_rack, fetch_offset, chosen)
        return chosen
