#!/usr/bin/env python3
"""Checks that the Python package writes the default timeout once: DEFAULT_TIMEOUT_S in
hotswap/client.py, equal to protocol/timeouts.hpp's kDefaultTimeout.

Fails, naming FILE:LINE, on a literal 300 (300, 300.0, 3e2, ...) in the package where a timeout
takes it: the default of a parameter whose name holds "timeout" (timeout=, ready_timeout=,
setup_timeout=, ...), a keyword argument of such a name in a call, or an assignment to such a
name or attribute. Docstrings and comments are not code and are not read. The one assignment
allowed is the constant's own.

Standard library only, for Debian's /usr/bin/python3 without any virtual environment.

Usage: check_python_constants.py [SOURCE_ROOT]   (default: the checkout this file is in)
"""

import ast
import os
import re
import sys

CONSTANT = "DEFAULT_TIMEOUT_S"
CONSTANT_MODULE = os.path.join("trainer_sdk", "python", "hotswap", "client.py")
PACKAGE = os.path.join("trainer_sdk", "python", "hotswap")
CPP_HEADER = os.path.join("protocol", "timeouts.hpp")


def cpp_default_seconds(root):
    """kDefaultTimeout's seconds, as protocol/timeouts.hpp writes them."""
    with open(os.path.join(root, CPP_HEADER)) as f:
        match = re.search(r"kDefaultTimeout\s*\{\s*(\d+)\s*\}", f.read())
    if match is None:
        raise SystemExit(f"check_python_constants: no `kDefaultTimeout{{N}}` in {CPP_HEADER}; "
                         "update this check to the header's new form")
    return float(match.group(1))


def number(node):
    """The value of a numeric literal (a unary minus included), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    return None


def target_name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def timeout_literals(tree, value):
    """(line, what) for every literal `value` given to a timeout in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            for arg, default in pairs:
                if "timeout" in arg.arg.lower() and number(default) == value:
                    name = getattr(node, "name", "lambda")
                    found.append((default.lineno, f"default of {name}({arg.arg}=...)"))
        elif isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg and "timeout" in keyword.arg.lower() and \
                        number(keyword.value) == value:
                    found.append((keyword.value.lineno, f"keyword argument {keyword.arg}="))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = target_name(target)
                if name and "timeout" in name.lower() and node.value is not None and \
                        number(node.value) == value:
                    found.append((node.lineno, f"assignment to {name}"))
    return found


def main(root):
    seconds = cpp_default_seconds(root)
    failures = []

    # The constant: assigned once, in its module, to the C++ default.
    constant_path = os.path.join(root, CONSTANT_MODULE)
    with open(constant_path) as f:
        tree = ast.parse(f.read(), constant_path)
    definitions = [n for n in tree.body if isinstance(n, ast.Assign)
                   and any(target_name(t) == CONSTANT for t in n.targets)]
    if len(definitions) != 1:
        failures.append(f"{CONSTANT_MODULE}: {CONSTANT} must be assigned once at module level "
                        f"(found {len(definitions)})")
        allowed = set()
    else:
        definition = definitions[0]
        allowed = {(CONSTANT_MODULE, definition.lineno)}
        if number(definition.value) != seconds:
            failures.append(f"{CONSTANT_MODULE}:{definition.lineno}: {CONSTANT} is "
                            f"{ast.unparse(definition.value)}, but {CPP_HEADER}'s "
                            f"kDefaultTimeout is {seconds:g} s: the two must agree")

    # No literal copy of it anywhere else in the package.
    package = os.path.join(root, PACKAGE)
    for folder, subfolders, files in os.walk(package):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            with open(path) as f:
                source = f.read()
            try:
                tree = ast.parse(source, path)
            except SyntaxError as error:
                failures.append(f"{relative}:{error.lineno}: does not parse: {error.msg}")
                continue
            # DEFAULT_TIMEOUT_S = 300.0 is itself an assignment to a timeout's name: its one
            # line, and no other of its module, is allowed.
            for line, what in sorted(timeout_literals(tree, seconds)):
                if (relative, line) not in allowed:
                    failures.append(f"{relative}:{line}: literal {seconds:g} as a timeout "
                                    f"({what}); use hotswap.client.{CONSTANT}")

    if failures:
        print(f"check_python_constants: the default timeout ({seconds:g} s) is written once, "
              f"as {CONSTANT} in {CONSTANT_MODULE}:")
        for failure in failures:
            print(f"  {failure}")
        return 1
    print(f"check_python_constants: ok ({CONSTANT} = {seconds:g} s, as {CPP_HEADER}; no literal "
          f"copy in {PACKAGE})")
    return 0


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here)))
