"""The compiled binary as evidence: build a kernel's configuration for a GPU architecture without a GPU,
disassemble it, and describe it (machine-code fingerprint, registers, spills, shared memory, theoretical
occupancy, instruction mix) so a lock entry can be compared with today's build on a CPU-only CI runner.

* :mod:`.disasm` finds and runs ``nvdisasm``;
* :mod:`.occupancy` computes theoretical occupancy per architecture;
* :mod:`.profile` turns a cubin into a :class:`~.profile.StaticProfile`;
* :mod:`.build` compiles a locked configuration as each runner would (NVRTC, nvcc, Triton).
"""
