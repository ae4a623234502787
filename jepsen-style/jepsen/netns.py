"""The network the cluster under test lives in: one bridge in the harness's private network
namespace and one namespace per node (a replica or an agent), joined to it by a veth pair.

The harness must already run inside private network, mount and pid namespaces (`run` re-executes
itself under `unshare`), so nothing here touches the host: when the harness's namespaces end,
every interface, rule and process in them goes too. A node's namespace is held open by a
`sleep` process of our own; node programs enter it with `nsenter --net`.

Partitions are iptables DROP rules inside the node namespaces (pysyncobj connects without
binding a source address, so only per-namespace rules see who is who). The harness itself, on
the bridge address, is never cut off: clients keep reaching whichever node they talk to, as a
client on the far side of a real partition would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

BRIDGE = "rsbr0"
SUBNET_PREFIX = "10.77.0"
HARNESS_IP = f"{SUBNET_PREFIX}.1"
FIRST_NODE_HOST = 10
MAX_NODES = 200
COMMAND_TIMEOUT_S = 10.0
"""Bound on every ip/iptables/nsenter call."""


class NetError(Exception):
    pass


def run_cmd(argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NetError(f"{' '.join(argv)}: {error}") from error
    if done.returncode != 0:
        raise NetError(f"{' '.join(argv)} exited {done.returncode}: "
                       f"{(done.stderr or done.stdout).strip()}")
    return done.stdout


def iptables_binary() -> str:
    for name in ("iptables", "iptables-nft", "iptables-legacy"):
        path = shutil.which(name)
        if path:
            return path
    raise NetError("iptables is not installed (scripts/test and jepsen-style/run install it "
                   "with apt-get; or install the iptables package)")


@dataclass
class NodeNs:
    name: str
    ip: str
    holder: subprocess.Popen[bytes]
    blocked: set[str] = field(default_factory=set)
    """Peer IPs this node currently drops traffic to and from."""

    @property
    def pid(self) -> int:
        return self.holder.pid

    def enter(self) -> list[str]:
        """argv prefix that runs a program inside this node's network namespace."""
        return ["nsenter", f"--target={self.pid}", "--net", "--"]

    def run(self, argv: Sequence[str]) -> str:
        return run_cmd([*self.enter(), *argv])


class Net:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeNs] = {}
        self._iptables = iptables_binary()
        self._closed = False
        run_cmd(["ip", "link", "set", "lo", "up"])
        run_cmd(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run_cmd(["ip", "addr", "add", f"{HARNESS_IP}/24", "dev", BRIDGE])
        run_cmd(["ip", "link", "set", BRIDGE, "up"])

    def add_node(self, name: str) -> NodeNs:
        if len(self.nodes) >= MAX_NODES:
            raise NetError(f"at most {MAX_NODES} nodes")
        ip = f"{SUBNET_PREFIX}.{FIRST_NODE_HOST + len(self.nodes)}"
        holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"],
                                  stdin=subprocess.DEVNULL)
        node = NodeNs(name, ip, holder)
        self.nodes[name] = node
        host_side = f"v{len(self.nodes) - 1}"
        try:
            self._wait_own_netns(node)
            run_cmd(["ip", "link", "add", host_side, "type", "veth", "peer", "name", "eth0",
                     "netns", str(node.pid)])
            run_cmd(["ip", "link", "set", host_side, "master", BRIDGE])
            run_cmd(["ip", "link", "set", host_side, "up"])
            node.run(["ip", "link", "set", "lo", "up"])
            node.run(["ip", "addr", "add", f"{ip}/24", "dev", "eth0"])
            node.run(["ip", "link", "set", "eth0", "up"])
            node.run([self._iptables, "-w", "-F"])  # also proves iptables works in there
        except NetError:
            self.close()
            raise
        return node

    def _wait_own_netns(self, node: NodeNs) -> None:
        """`unshare` execs `sleep` only after the namespace exists: wait until the holder's
        netns differs from ours (bounded)."""
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if os.readlink(f"/proc/{node.pid}/ns/net") != mine:
                    return
            except OSError:
                pass
            if node.holder.poll() is not None:
                raise NetError(f"the namespace holder of {node.name} exited "
                               f"{node.holder.returncode} (unshare --net refused?)")
            time.sleep(0.01)
        raise NetError(f"{node.name}: no network namespace after {COMMAND_TIMEOUT_S} s")

    # -- partitions --------------------------------------------------------------------------

    def block(self, a: str, b: str) -> None:
        """Drop all traffic between nodes a and b, both ways, in both namespaces."""
        for src, dst in ((a, b), (b, a)):
            node, peer = self.nodes[src], self.nodes[dst]
            if peer.ip in node.blocked:
                continue
            node.run([self._iptables, "-w", "-A", "INPUT", "-s", peer.ip, "-j", "DROP"])
            node.run([self._iptables, "-w", "-A", "OUTPUT", "-d", peer.ip, "-j", "DROP"])
            node.blocked.add(peer.ip)

    def partition(self, groups: Iterable[Iterable[str]]) -> list[tuple[str, str]]:
        """Cut every link between nodes of different groups (nodes in no group are left as
        they are). Returns the links cut."""
        sets = [sorted(g) for g in groups]
        cut = []
        for i, left in enumerate(sets):
            for right in sets[i + 1:]:
                for a in left:
                    for b in right:
                        self.block(a, b)
                        cut.append((a, b))
        return cut

    def cut_links(self, links: Iterable[tuple[str, str]]) -> None:
        for a, b in links:
            self.block(a, b)

    def heal(self) -> None:
        for node in self.nodes.values():
            if node.blocked and node.holder.poll() is None:
                node.run([self._iptables, "-w", "-F", "INPUT"])
                node.run([self._iptables, "-w", "-F", "OUTPUT"])
            node.blocked.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for node in self.nodes.values():
            if node.holder.poll() is None:
                node.holder.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.holder.wait(COMMAND_TIMEOUT_S)
        with contextlib.suppress(NetError):  # the namespace ends with the harness anyway
            run_cmd(["ip", "link", "del", BRIDGE])
