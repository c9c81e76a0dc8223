"""Run-time support beside the layers: the fairseq/torch compatibility fixes
(:mod:`.compat`), crash-safe checkpoints (:mod:`.checkpoints`) and moving an encoder
between tasks (:mod:`.transfer`)."""
