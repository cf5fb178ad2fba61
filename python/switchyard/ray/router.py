"""Request routers for Ray Serve's public request-router API.

PrefixAwareRouter sends a request to the replica holding the longest cached
prefix of its prompt, breaking ties by queue depth. It knows what each
replica caches from two sources: the block hashes replicas report (their
KV-cache events, through routing stats, refreshed every
request_routing_stats_period_s) and, in between, the requests it routed
itself (a replica that was sent a prompt will have its blocks by the time a
follow-up arrives). The ingress puts the prompt's block hashes in the
request's `block_hashes` keyword argument. A replica loses its affinity
once it is busier than the least busy one by imbalance_threshold requests
and by as many again as that one has: one hot prefix cannot pile everything
onto one replica, and a new replica (autoscaled, or restarting after a
failure) takes work as soon as the others queue for it; once it has run the
prefix it competes for it on equal terms.

Both routers register themselves (registry.py, per deployment name), so the
ingress's /metrics shows exactly the replicas they route to: a replica that
died or was scaled away leaves the page with it.

RoundRobinRouter is the baseline to compare against.
"""
from __future__ import annotations

import itertools
import time
from collections import defaultdict
from typing import Dict, List, Optional, Set

from ray.serve.request_router import FIFOMixin, PendingRequest, ReplicaID, RequestRouter, RunningReplica


def _register(router: RequestRouter) -> None:
    import switchyard.ray.registry  # by name: see registry.py

    switchyard.ray.registry.register(router)


class _InFlight:
    """Requests each replica is busy with, as this router sees them: the ones
    it sent and that have not completed (Ray Serve calls on_send_request and
    on_request_completed once per dispatched request), plus the ones it has
    just chosen the replica for and not sent yet (requests are routed
    concurrently: without these, a burst would all see the same idle
    replica), or the depth the replica reported, if larger."""

    TENTATIVE_S = 2.0  # a choice not sent by then was dropped (a retry chose again)

    def __init__(self) -> None:
        self.count: Dict[ReplicaID, int] = defaultdict(int)
        self.chosen: Dict[ReplicaID, List[float]] = defaultdict(list)

    def choose(self, replica_id: ReplicaID) -> None:
        self.chosen[replica_id].append(time.monotonic())

    def sent(self, replica_id: ReplicaID) -> None:
        if self.chosen.get(replica_id):
            self.chosen[replica_id].pop(0)
        self.count[replica_id] += 1

    def completed(self, replica_id: ReplicaID) -> None:
        self.count[replica_id] = max(0, self.count[replica_id] - 1)

    def forget(self, replica_id: ReplicaID) -> None:
        self.count.pop(replica_id, None)
        self.chosen.pop(replica_id, None)

    def depth(self, r: RunningReplica) -> int:
        pending = self.chosen.get(r.replica_id)
        if pending:
            cutoff = time.monotonic() - self.TENTATIVE_S
            while pending and pending[0] < cutoff:
                pending.pop(0)
        reported = (r.routing_stats or {}).get("queue_depth", 0)
        return max(self.count.get(r.replica_id, 0) + len(pending or ()), reported)


class PrefixAwareRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, imbalance_threshold: int = 4, max_routed_blocks: int = 1 << 20, **kwargs) -> None:
        _register(self)
        self.imbalance_threshold = imbalance_threshold
        self.max_routed_blocks = max_routed_blocks
        self.inflight = _InFlight()
        # block hash -> replicas this router sent a request with that block to
        self.routed_blocks: Dict[int, Set[ReplicaID]] = {}
        # the last reported hash list per replica, as a set (rebuilt when it changes)
        self.reported: Dict[ReplicaID, tuple] = {}
        self.decisions = {"prefix_hit": 0, "least_loaded": 0}

    def _reported_set(self, r: RunningReplica) -> Set[int]:
        hashes = (r.routing_stats or {}).get("block_hashes") or []
        seen = self.reported.get(r.replica_id)
        if seen is None or seen[0] is not hashes:
            seen = (hashes, set(hashes))
            self.reported[r.replica_id] = seen
        return seen[1]

    def _matched_blocks(self, r: RunningReplica, hashes: List[int]) -> int:
        reported = self._reported_set(r)
        n = 0
        for h in hashes:  # a prefix: the chain stops at the first block it lacks
            if h in reported or r.replica_id in self.routed_blocks.get(h, ()):
                n += 1
            else:
                break
        return n

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        if not candidate_replicas:
            return []
        hashes = (pending_request.kwargs.get("block_hashes") if pending_request is not None else None) or []
        least = min(self.inflight.depth(r) for r in candidate_replicas)
        limit = least + max(self.imbalance_threshold, least)

        def key(r: RunningReplica):
            matched = self._matched_blocks(r, hashes)
            if self.inflight.depth(r) >= limit:
                matched = 0  # too busy to keep its affinity
            return (-matched, self.inflight.depth(r), r.replica_id.unique_id)

        ranked = sorted(candidate_replicas, key=key)
        self.inflight.choose(ranked[0].replica_id)
        hit = bool(hashes) and self._matched_blocks(ranked[0], hashes) > 0
        self.decisions["prefix_hit" if hit else "least_loaded"] += 1
        # The first choice will hold these blocks once it has run the
        # prompt: follow-ups go there before its next report says so.
        for h in hashes:
            if len(self.routed_blocks) >= self.max_routed_blocks:
                self.routed_blocks.clear()  # the replicas' reports take over
            self.routed_blocks.setdefault(h, set()).add(ranked[0].replica_id)
        return [[ranked[0]]] + ([ranked[1:]] if len(ranked) > 1 else [])

    def on_send_request(self, replica_id: ReplicaID) -> None:
        super().on_send_request(replica_id)
        self.inflight.sent(replica_id)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        super().on_request_completed(replica_id, internal_request_id)
        self.inflight.completed(replica_id)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        for owners in self.routed_blocks.values():
            owners.discard(replica_id)
        self.reported.pop(replica_id, None)
        self.inflight.forget(replica_id)


class RoundRobinRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, **kwargs) -> None:
        _register(self)
        self.turn = itertools.count()

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        if not candidate_replicas:
            return []
        ordered = sorted(candidate_replicas, key=lambda r: r.replica_id.unique_id)
        i = next(self.turn) % len(ordered)
        rest = ordered[i + 1:] + ordered[:i]
        return [[ordered[i]]] + ([rest] if rest else [])
