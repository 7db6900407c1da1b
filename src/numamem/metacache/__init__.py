"""The sysadvisor metadata cache (katalyst-core MetaCache semantics), its checkpoint and metrics.

numamem implements katalyst's 2023 MetaReader/MetaWriter API plus ``RangePool``,
with eight deliberate decisions where upstream is unsafe or underspecified
(the code refers to them by number):

D1. Copy in, copy out: every value stored is a deep copy of the caller's, and
    every value returned is a deep copy of the stored one (upstream stores the
    caller's object for new containers, pools and regions).
D2. Returning False from a Range callback stops the whole walk (upstream stops
    only the current pod's containers and goes on with the next pod).
D3. Each checkpoint is one consistent point-in-time state of all entries
    (upstream reads the other families without their locks).
D4. ``null`` entry maps in a checkpoint read as empty maps (upstream keeps nil
    maps, and a later write panics).
D5. The checkpoint checksum is FNV-1a-32 over numamem's canonical JSON, not over
    go-spew text of Go values: files written by the Go agent do not verify.
D6. A checkpoint whose checksum fails refuses start-up; the operator may ask
    to discard it (moved aside, never deleted, never adopted unverified).
D7. A Range callback may read the cache (upstream deadlocks); it may not
    write through the cache API, only through the object it is handed
    (RangeAndUpdate) or its return value (RangeAndDelete).
D8. A container's cgroup is found from ``ContainerInfo.container_id`` or the
    runtime id the memory manager learned through AddContainer, then the
    kubepods layouts of the cgroupfs and systemd drivers on cgroup v1, v2 and
    hybrid hosts.
"""
