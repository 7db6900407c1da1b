"""Making a decided resize (:func:`.decide.decide`) on a state: one change.

The blocks and the machine state change together, as the kubelet's ``validateState``
replays them from the blocks: a group extended to new nodes gives them the group's
assignment count and cells and moves every block of the group; a growth is reserved on
the group's nodes in the Static fill order, a shrink given back from the last node filled.
"""

from __future__ import annotations

from numamem.memorymanager.resize.decide import EXTENDED, Resize, memory_table, on_group
from numamem.memorymanager.state.arithmetic import copy_for_write, node_state, reserve_on
from numamem.memorymanager.state.model import State
from numamem.memtypes import Block, MachineState


def apply(state: State, resize: Resize) -> None:
    """Make ``resize`` (decided on this state by :func:`decide`) on ``state``: one change."""
    if not resize.changes:
        return
    old, new = resize.old_nodes, resize.nodes
    machine = copy_for_write(state.machine_view(), new)
    budget = resize.pod_level
    delta = (
        resize.new_size - resize.old_size
        if budget is None
        else budget.new_size - budget.old_size  # the budget is reserved, not its containers
    )
    if resize.action == EXTENDED:
        count = node_state(machine, old[0]).number_of_assignments
        for n in new:
            node = node_state(machine, n)
            if n not in old:
                node.number_of_assignments = count
            node.cells = list(new)
        _retarget(state, set(old), new)
    if delta > 0:
        for n in new:
            table = memory_table(machine, n)
            if table is not None:
                delta = reserve_on(table, delta)
    else:
        _release_from_last(machine, new, -delta)
    state.adopt_machine_state(machine)
    if budget is None:
        state.set_memory_blocks(resize.pod_uid, resize.container, list(resize.blocks))
        return
    state.set_pod_memory_blocks(resize.pod_uid, list(budget.blocks), budget.exclusive)
    for name, blocks in budget.containers:
        state.set_memory_blocks(resize.pod_uid, name, list(blocks))


def _retarget(state: State, old: set[int], new: tuple[int, ...]) -> None:
    """Every block (container and pod-level) whose nodes are ``old`` names ``new`` instead."""
    assignments = state.get_memory_assignments()
    for uid, containers in assignments.items():
        for name, blocks in containers.items():
            if any(on_group(b, old) for b in blocks):
                state.set_memory_blocks(uid, name, [_moved(b, old, new) for b in blocks])
    for uid, blocks in state.get_pod_memory_assignments().items():
        if any(on_group(b, old) for b in blocks):
            known = state.exclusive_known(uid)
            exclusive = state.exclusive_containers(uid) if known else None
            state.set_pod_memory_blocks(uid, [_moved(b, old, new) for b in blocks], exclusive)


def _moved(block: Block, old: set[int], new: tuple[int, ...]) -> Block:
    return Block(new, block.type, block.size) if on_group(block, old) else block


def _release_from_last(machine: MachineState, nodes: tuple[int, ...], size: int) -> None:
    """Give ``size`` bytes of memory back, from the highest node with memory reserved down."""
    for n in reversed(nodes):
        table = memory_table(machine, n)
        if table is None or size == 0:
            continue
        take = min(table.reserved, size)
        table.reserved -= take
        table.free += take
        size -= take
