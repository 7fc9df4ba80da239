"""A tiny random-weight qwen2 checkpoint and a BPE tokenizer, written on the box with the image's libraries.

    python3 tests/device/tiny_qwen2.py OUT [--heads 4 --kv-heads 2 --hidden 512]

Nothing is downloaded. For tensor parallel N, the head counts (and the vocabulary, 1024) must divide by N:
``--heads 2N --kv-heads N --hidden 128N`` keeps a head size of 64. Used by evidence.sh and multigpu.sh.
"""
import argparse
from pathlib import Path
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
args = argparse.ArgumentParser()
args.add_argument("out", type=Path)
args.add_argument("--heads", type=int, default=4)
args.add_argument("--kv-heads", type=int, default=2)
args.add_argument("--hidden", type=int, default=512)
a = args.parse_args()
out = a.out; out.mkdir(parents=True, exist_ok=True)
special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
words = ("the quick brown fox jumps over the lazy dog offline wheelhouse doctor serve token engine model "
         "hello world a an of to in is it that for on with as was at by be this from or have not are").split()
corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(24)) for i in range(400)]
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=900, special_tokens=special,
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
fast.save_pretrained(out)
vocab = 1024
cfg = Qwen2Config(vocab_size=vocab, hidden_size=a.hidden, intermediate_size=1024, num_hidden_layers=2,
                  num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, eos_token_id=fast.eos_token_id, bos_token_id=fast.pad_token_id,
                  pad_token_id=fast.pad_token_id)
cfg.architectures = ["Qwen2ForCausalLM"]
torch.manual_seed(0)
model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
GenerationConfig(eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id).save_pretrained(out)
print("tokenizer", len(fast), "params", sum(p.numel() for p in model.parameters()), "heads", a.heads, "kv-heads", a.kv_heads)
