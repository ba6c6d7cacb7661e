#!/usr/bin/env python3
"""Exports BERT-family encoders with random weights to ONNX (static shapes, torch's dynamo
exporter, opset 18, eager attention: plain MatMul + Softmax), for models whose timing does
not depend on the weights' values.

usage: export_bert.py OUT_DIR [minilm] [bert512] [bertbase]

- minilm:   MiniLM-L6's shape (hidden 384, 6 layers, 12 heads, FFN 1536), batch 32 x 128
- bert512:  a BERT-style encoder (hidden 512, 8 layers, 8 heads, FFN 2048), batch 16 x 256
- bertbase: BERT-base (hidden 768, 12 layers, 12 heads, FFN 3072), batch 8 x 384
Inputs int64 input_ids / attention_mask / token_type_ids, output last_hidden_state; writes
OUT_DIR/<name>.onnx. Needs torch, transformers and onnxscript (the GPU machine has them; here
models/setup_torch_models.sh installs them). benches/e2e_torch.py times the same configs.
"""
import os, sys, warnings
warnings.filterwarnings("ignore")

# name: (hidden, layers, heads, ffn, batch, sequence)
CONFIGS = {
    "minilm": (384, 6, 12, 1536, 32, 128),
    "bert512": (512, 8, 8, 2048, 16, 256),
    "bertbase": (768, 12, 12, 3072, 8, 384),
}


def bert_config(name):
    from transformers import BertConfig
    hidden, layers, heads, ffn, _, _ = CONFIGS[name]
    return BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=512,
                      attn_implementation="eager")


def main():
    import torch
    from transformers import BertModel
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)

    class Encoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    for name in sys.argv[2:] or list(CONFIGS):
        torch.manual_seed(0)
        _, _, _, _, batch, seq = CONFIGS[name]
        model = Encoder(BertModel(bert_config(name))).eval()
        ids = torch.randint(0, 30522, (batch, seq))
        mask = torch.ones(batch, seq, dtype=torch.int64)
        tt = torch.zeros(batch, seq, dtype=torch.int64)
        path = os.path.join(out_dir, name + ".onnx")
        with torch.no_grad():
            prog = torch.onnx.export(model, (ids, mask, tt), dynamo=True, opset_version=18,
                                     input_names=["input_ids", "attention_mask", "token_type_ids"],
                                     output_names=["last_hidden_state"])
        prog.save(path + ".tmp")
        os.replace(path + ".tmp", path)
        print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
