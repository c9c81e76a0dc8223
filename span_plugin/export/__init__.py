"""What leaves the package: ``span-export hf`` of a fine-tuned checkpoint
(:mod:`.model_export`, :mod:`.hf_classes`), ``span-export onnx`` (:mod:`.onnx_graph`,
:mod:`.onnx_export`, :mod:`.onnx_quantize`) and the accuracy guard of int8
(:mod:`.int8_guard`, :mod:`.int8_check`)."""
