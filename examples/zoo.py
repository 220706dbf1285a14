"""A model zoo: one named model from torchvision or Hugging Face transformers trained on random
data, with the examples' loop (common.py: SGD with momentum, each step's device time by CUDA
events). No weights are downloaded and nothing is fetched: torchvision models are built with
weights=None, transformers models from a configuration object written here.

    marmoset run --sim -- .venv/bin/python examples/zoo.py --model gpt2 --steps 3
    marmoset run --sim --no-shim -- .venv/bin/python examples/zoo.py --list

Needs scripts/setup-zoo.sh (torchvision, transformers). Each model's default batch and sizes
keep its peak at a few GiB and a step set within a minute of host time in shape mode on the
simulated GPU; --batch, --image, --seq and --layers change them.
"""
import os
import sys

# transformers: never reach for the network (no hub look-ups, no telemetry).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch
from torch import nn

from common import parser, settle, train

ce = nn.functional.cross_entropy


def vision(name, classes=1000, **kw):
    """A torchvision classifier, untrained."""
    import torchvision

    return getattr(torchvision.models, name)(weights=None, num_classes=classes, **kw)


def timm_model(name, classes=1000):
    """A timm model by its registered name, untrained (pretrained=False: nothing is fetched)."""
    import timm

    return timm.create_model(name, pretrained=False, num_classes=classes)


def segmentation(name, classes=21):
    """A torchvision segmentation model, untrained, backbone untrained too (its default would
    download ImageNet weights); the loss is the per-pixel cross-entropy of its main output."""
    import torchvision

    m = getattr(torchvision.models.segmentation, name)(
        weights=None, weights_backbone=None, num_classes=classes
    )

    class Out(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)["out"]

    return Out()


class Causal(nn.Module):
    """A decoder-only language model: logits for each position; the loss is next-token
    cross-entropy on the shifted sequence, as transformers computes it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits


class Seq2Seq(nn.Module):
    """An encoder-decoder: teacher-forced, the decoder reads the target shifted right (its first
    token the decoder start), the loss is cross-entropy on the target."""

    def __init__(self, model, start):
        super().__init__()
        self.model = model
        self.start = start

    def forward(self, pair):
        src, tgt = pair
        dec = torch.cat([torch.full_like(tgt[:, :1], self.start), tgt[:, :-1]], dim=1)
        return self.model(input_ids=src, decoder_input_ids=dec).logits


class Logits(nn.Module):
    """A transformers model whose output's `.logits` is what the loss reads."""

    def __init__(self, model, key):
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, x):
        return self.model(**{self.key: x}).logits


def next_token(logits, ids):
    v = logits.shape[-1]
    return ce(logits[:, :-1].reshape(-1, v).float(), ids[:, 1:].reshape(-1))


def tokens(logits, target):
    return ce(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


def gpt2(a):
    from transformers import GPT2Config, GPT2LMHeadModel

    # GPT-2 small (Radford et al., 2019): 12 layers, hidden 768, 12 heads, context 1024.
    cfg = GPT2Config(n_layer=a.layers or 12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    return Causal(GPT2LMHeadModel(cfg)), ("tokens", cfg.vocab_size), next_token


def llama(a):
    from transformers import LlamaConfig, LlamaForCausalLM

    # A small LLaMA-style decoder: RMSNorm, rotary positions, SwiGLU, grouped-query attention
    # (4 key/value heads for 16 query heads), untied embeddings, LLaMA's 32,000-token vocabulary.
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=a.layers or 8,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    return Causal(LlamaForCausalLM(cfg)), ("tokens", cfg.vocab_size), next_token


def t5(a):
    from transformers import T5Config, T5ForConditionalGeneration

    # t5-small (Raffel et al., 2020): 6 + 6 layers, d_model 512, 8 heads, d_ff 2048, relative
    # position buckets, vocabulary 32,128.
    cfg = T5Config(
        vocab_size=32128,
        d_model=512,
        d_kv=64,
        d_ff=2048,
        num_layers=a.layers or 6,
        num_heads=8,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    model = Seq2Seq(T5ForConditionalGeneration(cfg), cfg.decoder_start_token_id)
    return model, ("pair", cfg.vocab_size), tokens


def vit(a):
    from transformers import ViTConfig, ViTForImageClassification

    # ViT-Base/16 (Dosovitskiy et al., 2021): 12 layers, hidden 768, 12 heads, MLP 3072.
    cfg = ViTConfig(
        image_size=a.image,
        patch_size=16,
        hidden_size=768,
        num_hidden_layers=a.layers or 12,
        num_attention_heads=12,
        intermediate_size=3072,
        num_labels=1000,
    )
    return Logits(ViTForImageClassification(cfg), "pixel_values"), ("image", 1000), ce


def distilbert(a):
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    # DistilBERT-base (Sanh et al., 2019): 6 layers, hidden 768, 12 heads, masked-LM head.
    cfg = DistilBertConfig(vocab_size=30522, n_layers=a.layers or 6, dim=768, n_heads=12, hidden_dim=3072)
    return Logits(DistilBertForMaskedLM(cfg), "input_ids"), ("tokens", cfg.vocab_size), tokens


# name -> (build(args) -> (model, (input kind, classes), loss), default batch, image, seq, what)
MODELS = {
    "vgg16_bn": (lambda a: (vision("vgg16_bn"), ("image", 1000), ce), 32, 224, None,
                 "VGG-16 with BatchNorm (torchvision)"),
    "resnet50": (lambda a: (vision("resnet50"), ("image", 1000), ce), 32, 224, None,
                 "ResNet-50 (torchvision)"),
    "densenet121": (lambda a: (vision("densenet121"), ("image", 1000), ce), 32, 224, None,
                    "DenseNet-121 (torchvision)"),
    "mobilenet_v3_large": (lambda a: (vision("mobilenet_v3_large"), ("image", 1000), ce), 64, 224, None,
                           "MobileNetV3-Large: depthwise convolutions, hard-swish, squeeze-excite (torchvision)"),
    "efficientnet_b0": (lambda a: (vision("efficientnet_b0"), ("image", 1000), ce), 32, 224, None,
                        "EfficientNet-B0: MBConv, SiLU, stochastic depth (torchvision)"),
    "convnext_tiny": (lambda a: (vision("convnext_tiny"), ("image", 1000), ce), 32, 224, None,
                      "ConvNeXt-Tiny: 7x7 depthwise, LayerNorm, GELU (torchvision)"),
    "swin_t": (lambda a: (vision("swin_t"), ("image", 1000), ce), 32, 224, None,
               "Swin-T: shifted-window attention (torchvision)"),
    "regnety_016": (lambda a: (timm_model("regnety_016"), ("image", 1000), ce), 32, 224, None,
                    "RegNetY-1.6GF: grouped convolutions, squeeze-excite (timm)"),
    "fcn_resnet50": (lambda a: (segmentation("fcn_resnet50"), ("mask", 21), ce), 4, 384, None,
                     "FCN with a dilated ResNet-50, 21 classes, per-pixel loss (torchvision)"),
    "gpt2": (lambda a: gpt2(a), 4, None, 512, "GPT-2 small (transformers GPT2Config)"),
    "llama": (lambda a: llama(a), 4, None, 512,
              "LLaMA-style decoder, 8 layers, hidden 1024, GQA 16/4 (transformers LlamaConfig)"),
    "t5": (lambda a: t5(a), 16, None, 256,
           "t5-small-like encoder-decoder, teacher-forced (transformers T5Config)"),
    "vit": (lambda a: vit(a), 32, 224, None, "ViT-Base/16 (transformers ViTConfig)"),
    "distilbert": (lambda a: distilbert(a), 8, None, 512,
                   "DistilBERT-base, masked-LM loss (transformers DistilBertConfig)"),
}


def main():
    p = parser(__doc__.splitlines()[0], batch=None)
    p.add_argument("--model", choices=MODELS, help="the model to train")
    p.add_argument("--list", action="store_true", help="list the models and their defaults")
    p.add_argument("--image", type=int, help="image side, for image models")
    p.add_argument("--seq", type=int, help="sequence length, for language models (t5: the source; the target is a quarter)")
    p.add_argument("--layers", type=int, help="transformer layers (default the model's)")
    a = p.parse_args()
    if a.list:
        for name, (_, batch, image, seq, what) in MODELS.items():
            size = f"image {image}" if image else f"sequence {seq}"
            print(f"{name:20s} batch {batch:3d}, {size:15s} {what}")
        return
    if not a.model:
        p.error("--model is required (--list names them)")
    build, batch, image, seq, _ = MODELS[a.model]
    a.batch = a.batch or batch
    a.image = a.image or image
    a.seq = a.seq or seq
    settle(a)
    model, (kind, classes), loss = build(a)
    dev, b = a.device, a.batch

    def make_batch():
        if kind == "image":
            x = torch.randn(b, 3, a.image, a.image, device=dev)
            return x, torch.randint(0, classes, (b,), device=dev)
        if kind == "mask":
            x = torch.randn(b, 3, a.image, a.image, device=dev)
            return x, torch.randint(0, classes, (b, a.image, a.image), device=dev)
        if kind == "tokens":
            ids = torch.randint(0, classes, (b, a.seq), device=dev)
            # A causal model predicts its own next tokens; a masked one random targets.
            return ids, (ids if loss is next_token else torch.randint(0, classes, (b, a.seq), device=dev))
        src = torch.randint(0, classes, (b, a.seq), device=dev)
        tgt = torch.randint(0, classes, (b, max(1, a.seq // 4)), device=dev)
        return (src, tgt), tgt

    params = sum(q.numel() for q in model.parameters())
    size = f"{a.image} x {a.image}" if kind in ("image", "mask") else f"sequence {a.seq}"
    print(f"{a.model}: {params / 1e6:.1f} M parameters, batch {b}, {size}", flush=True)
    lr = 0.1 if kind in ("image", "mask") else 1e-4
    train(model, make_batch, loss, a.steps, dev, lr=lr, amp=a.amp, tf32=a.tf32, memory_fraction=a.memory_fraction)


if __name__ == "__main__":
    sys.exit(main())
