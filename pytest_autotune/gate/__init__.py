"""What a re-run of a locked kernel means: the gate's verdict against the lock (:mod:`.verdict`), the
machine probes that tell a slower machine from a slower kernel (:mod:`.probes`) and what a re-tune keeps
(:mod:`.retune`). Usable without pytest."""
