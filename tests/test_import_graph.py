"""No import circle in scepter_like/, function-level imports included, and model/ never imports solver/."""

import ast
import os

from conftest import REPO

PACKAGE = 'scepter_like'


def modules():
    """``{module name: path}`` of every module of the package (a package by its ``__init__``)."""
    found = {}
    for folder, _, files in os.walk(os.path.join(REPO, PACKAGE)):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                module = os.path.relpath(path, REPO)[:-3].replace(os.sep, '.').removesuffix('.__init__')
                found[module] = path
    return found


def import_graph():
    """``{module: the package's modules it imports anywhere}``, leaving out a module's own packages (importing a
    package runs its ``__init__`` first: that is no circle)."""
    known = modules()

    def owner(name):  # the module that defines ``name`` (a module, or a name inside one)
        while name and name not in known:
            name = name.rpartition('.')[0]
        return name

    graph = {}
    for module, path in known.items():
        package = module if path.endswith('__init__.py') else module.rpartition('.')[0]
        targets = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                targets.update(owner(a.name) for a in node.names if a.name.startswith(PACKAGE))
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit('.', node.level - 1)[0] if node.level else ''
                source = '.'.join(filter(None, (base, node.module))) if node.level else node.module or ''
                if source.startswith(PACKAGE):
                    targets.update(owner(f'{source}.{a.name}') for a in node.names)
        graph[module] = {t for t in targets if t and t != module and not module.startswith(t + '.')}
    return graph


def circles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_of_the_package_imports_itself_through_others():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]


def test_model_does_not_import_solver():
    graph = import_graph()
    offenders = {m: sorted(t for t in ts if t.startswith('scepter_like.solver')) for m, ts in graph.items()}
    assert {m: ts for m, ts in offenders.items() if m.startswith('scepter_like.model') and ts} == {}
