#!/usr/bin/env python3
"""Writes ROOT/state.json of a berth-hostpath holding N volumes, each
controller-published to NODE, staged and published (paths under ROOT/prefill,
which need not exist): the state of a busy node, in the format every version
loads. For hostpath_latency (tests/csi/hostpath_latency.cpp).

    hostpath_prefill.py ROOT N [NODE=n1]
"""
import json
import os
import sys


def main():
    root, n = sys.argv[1], int(sys.argv[2])
    node = sys.argv[3] if len(sys.argv) > 3 else "n1"
    os.makedirs(os.path.join(root, "volumes"), exist_ok=True)
    how = {"access_mode": 1, "readonly": False}
    state = {"volumes": {}, "controller_publications": {}, "stagings": {}, "publications": {}}
    for i in range(n):
        vid = "hp-prefill%06d" % i
        staging = os.path.join(root, "prefill", "staging-%d" % i)
        target = os.path.join(root, "prefill", "pods", "pod-%d" % i)
        state["volumes"][vid] = {"name": "prefill-%d" % i, "capacity_bytes": 1 << 20,
                                 "parameters": {"tier": "standard"}}
        state["controller_publications"][vid] = {node: how}
        state["stagings"][staging] = {"volume_id": vid, "how": how}
        state["publications"][target] = {"volume_id": vid, "staging_target_path": staging,
                                         "how": how}
    with open(os.path.join(root, "state.json"), "w") as f:
        json.dump(state, f, indent=2)


if __name__ == "__main__":
    main()
