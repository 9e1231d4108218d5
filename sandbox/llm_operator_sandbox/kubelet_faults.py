"""What the local kubelet says, as a kubelet does, when a pod cannot start.

The local kubelet runs containers as processes: it pulls no image and attaches no
volume. These stand-ins give it the kubelet's (and the attach-detach controller's)
waiting reasons and Events for the failures a user meets first, in their formats, so
that the operator's reading of them (``llm_operator.health.podfailures``) is tested against
the pods and Events a cluster has (docs/TESTING.md says which part is real):

- **an image it cannot pull**: a registry host under ``.invalid`` (RFC 2606: a name
  reserved never to resolve, so a real kubelet cannot pull it either) fails the pull:
  waiting ``ErrImagePull`` (containerd's "no such host" message), then
  ``ImagePullBackOff`` while it backs off, and again; Events ``Failed`` and ``BackOff``;
- **a missing Secret or key** in ``env``: waiting ``CreateContainerConfigError`` with
  the kubelet's ``secret "NAME" not found`` / ``couldn't find key KEY in Secret NS/NAME``,
  retried, Event ``Failed`` "Error: ...";
- **a ReadWriteOnce claim on two nodes**: the claim is "attached" to the node of the
  first pod that mounts it; a pod on another node stays in ``ContainerCreating`` with a
  ``FailedAttachVolume`` Event "Multi-Attach error for volume ...", until the first
  pods on that node are gone (as the attach-detach controller does).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

UNPULLABLE_SUFFIX = ".invalid"
PULL_BACKOFF_SECONDS = (10.0, 20.0, 40.0, 80.0, 160.0, 300.0)  # the kubelet's, capped


def registry_host(image: str) -> str | None:
    """The registry host of an image reference (None: Docker Hub's default)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first.split(":")[0]
    return None


def pull_error(image: str) -> str | None:
    """containerd's error for an image whose registry cannot be reached (a host under
    ``.invalid``), or None: the image is taken as pulled."""
    host = registry_host(image)
    if host is None or not host.endswith(UNPULLABLE_SUFFIX):
        return None
    path = image.split("/", 1)[1]
    repo, _, tag = path.partition(":")
    return (f'failed to pull and unpack image "{image}": failed to resolve reference '
            f'"{image}": failed to do request: Head "https://{host}/v2/{repo}/manifests/'
            f'{tag or "latest"}": dial tcp: lookup {host}: no such host')


@dataclass
class Attachments:
    """ReadWriteOnce claims attached to nodes (the attach-detach controller's view):
    (namespace, claim) -> (node, pods that hold it there)."""

    held: dict[tuple[str, str], tuple[str, set[str]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, namespace: str, claim: str, node: str, pod: str) -> list[str]:
        """Attach ``claim`` to ``node`` for ``pod``; the pods holding it on another node
        when it is attached there ([]: attached, or already attached here)."""
        with self.lock:
            found = self.held.get((namespace, claim))
            if found is None or not found[1]:
                self.held[(namespace, claim)] = (node, {pod})
                return []
            where, pods = found
            if where == node:
                pods.add(pod)
                return []
            return sorted(pods)

    def detach(self, pod: str) -> None:
        """``pod`` is gone: a claim no pod holds any more is detached."""
        with self.lock:
            for key, (_node, pods) in list(self.held.items()):
                pods.discard(pod)
                if not pods:
                    del self.held[key]
