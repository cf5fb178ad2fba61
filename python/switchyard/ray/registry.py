"""The routers of this process, by deployment name, for the ingress's
/metrics. A module of its own, imported by name at call time: Ray Serve may
ship a router class pickled by value, with a copy of its module's globals,
so a registry kept in router.py would not be the one the ingress reads."""
from typing import Any, Dict

ROUTERS: Dict[str, Any] = {}


def register(router) -> None:
    ROUTERS[router._deployment_id.name] = router


def live_replica_stats(deployment: str) -> Dict[str, Dict[str, Any]]:
    """The last routing stats of each replica the deployment's router in
    this process knows as running ({} before its first request)."""
    router = ROUTERS.get(deployment)
    if router is None:
        return {}
    return {rid.unique_id: dict(r.routing_stats or {}) for rid, r in list(router.curr_replicas.items())}
