"""Run-time support beside the layers: the fairseq/torch compatibility fixes
(:mod:`.compat`), crash-safe checkpoints (:mod:`.checkpoints`), moving an encoder
between tasks (:mod:`.transfer`) and the data record in fairseq's task state
(:mod:`.data_record`)."""
