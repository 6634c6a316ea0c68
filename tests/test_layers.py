"""The package's import layers (docs/architecture.md): every import of an electra_tf module,
function-local and TYPE_CHECKING ones included, points down the layer order, and no import
cycle exists. Reads the sources' syntax trees; nothing is imported."""

import ast
import pathlib

from helpers.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "electra_tf"

# Layer of a module, by the longest matching name prefix; a module may import its own layer
# and the layers below it. Entry-point wiring: electra_tf.convert (python -m), electra_tf.commands
# (the console scripts).
LAYERS = [
    ("foundations", ["electra_tf", "electra_tf.modeling.bert_config"]),
    ("model reading", ["electra_tf.reading"]),
    ("modeling", ["electra_tf.modeling"]),
    ("generic training", ["electra_tf.training"]),
    ("pre-training", ["electra_tf.pretraining"]),
    ("data preparation", ["electra_tf.data_prep"]),
    ("fine-tuning", ["electra_tf.finetuning"]),
    ("run wiring", ["electra_tf.pretraining.task", "electra_tf.pretraining.run",
                    "electra_tf.finetuning.runner", "electra_tf.finetuning.trials",
                    "electra_tf.probing"]),
    ("interop exports", ["electra_tf.interop"]),
    ("entry points", ["electra_tf.convert", "electra_tf.learning_curves", "electra_tf.predict",
                      "electra_tf.commands"]),
]


def _modules() -> dict[str, pathlib.Path]:
  found = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    found[".".join(parts)] = path
  return found


def _rank(module: str) -> int:
  best, rank = -1, None
  for i, (_, prefixes) in enumerate(LAYERS):
    for prefix in prefixes:
      matches = module == prefix or module.startswith(prefix + ".")
      if matches and len(prefix) > best:
        best, rank = len(prefix), i
  return rank


def _imports(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
  """Every electra_tf module ``module`` imports, wherever the import statement stands."""
  package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
  out = set()
  for node in ast.walk(ast.parse(path.read_text())):
    targets = []
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
      targets = [f"{base}.{a.name}" for a in node.names]
    for target in targets:
      while target and target not in known:
        target = target.rpartition(".")[0]
      if target.startswith("electra_tf") and target != module:
        out.add(target)
  return out


def _graph() -> dict[str, set[str]]:
  modules = _modules()
  return {m: _imports(m, p, set(modules)) for m, p in modules.items()}


def test_every_import_points_down_the_layers():
  graph = _graph()
  upward = [f"{m} ({LAYERS[_rank(m)][0]}) imports {t} ({LAYERS[_rank(t)][0]})"
            for m, targets in graph.items() for t in sorted(targets)
            if _rank(t) > _rank(m) and not (m.startswith(t + ".") or m == t)]
  assert not upward, "\n".join(upward)


def test_pretraining_and_finetuning_do_not_import_each_other():
  """Two separate layers in the order of docs/architecture.md, and peers: neither side (its
  run wiring included) imports the other."""
  graph = _graph()
  sides = ("electra_tf.pretraining", "electra_tf.finetuning")
  crossing = [f"{m} -> {t}" for m, targets in graph.items() for t in sorted(targets)
              for a, b in (sides, sides[::-1])
              if (m == a or m.startswith(a + ".")) and (t == b or t.startswith(b + "."))]
  assert not crossing, crossing


def test_the_layer_order_is_the_documented_one():
  """The layer table of docs/architecture.md lists these layers in this order."""
  doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
  table = [line.split("|")[1].strip() for line in doc.splitlines()
           if line.startswith("| ") and not line.startswith("| layer")
           and not line.startswith("|---")]
  assert table[:len(LAYERS)] == [name for name, _ in LAYERS]


def test_root_modules_import_no_subpackage_but_modeling_config():
  graph = _graph()
  root = [m for m, path in _modules().items()
          if path.parent == PACKAGE and path.name != "__init__.py" and m not in LAYERS[-1][1]]
  allowed = ("electra_tf.modeling.bert_config",)
  reaching = [f"{m} -> {t}" for m in root for t in sorted(graph[m])
              if t.count(".") > 1 and t not in allowed]
  assert root and not reaching, reaching


def test_no_import_cycle():
  graph = _graph()
  state: dict[str, int] = {}  # 1: on the current path, 2: done

  def visit(module: str, path: list[str]) -> list[str] | None:
    state[module] = 1
    for target in sorted(graph[module]):
      if state.get(target) == 1:
        return path + [module, target]
      if target not in state and (cycle := visit(target, path + [module])):
        return cycle
    state[module] = 2
    return None

  for module in sorted(graph):
    if module not in state:
      cycle = visit(module, [])
      assert cycle is None, " -> ".join(cycle)
