"""A condition's value written in the config: a number or an expression of the coordinates.

``VALUE: -sin(pi * x)`` or ``VALUE: exp(-t) * cos(2 * pi * y)``: arithmetic (+ - * / ** %), the
domain's coordinate names, ``pi`` and ``e``, and the functions in ``FUNCTIONS``.  The text
is parsed once (Python's ``ast``) and checked against that short list, so a config can
never run code; it is evaluated with numpy on the points of a draw (each resampling too),
and a value that is NaN or inf at a drawn point (``log(x)`` on a face at x = 0) is one
error line naming the point, not a numpy warning and a NaN loss steps later.
"""

import ast
import operator

import numpy as np

from scepter_like.errors import ConfigError

FUNCTIONS = {
    name: getattr(np, name)
    for name in ('sin', 'cos', 'tan', 'arctan', 'sinh', 'cosh', 'tanh', 'exp', 'log', 'sqrt', 'abs', 'sign')
}
CONSTANTS = {'pi': np.pi, 'e': np.e}
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class Expression:
    """``Expression(text_or_number, names, where)(points [n, len(names)]) -> [n]`` float64."""

    def __init__(self, value, names, where):
        self.names, self.where = list(names), where
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f'{where}: expected a number or an expression of {self.names}, got {value!r}')
        self.text = str(value)
        try:
            self.tree = ast.parse(self.text.strip(), mode='eval').body
        except SyntaxError as e:
            raise ConfigError(f'{where}: {self.text!r} is not an expression ({e.msg})') from None
        self._check(self.tree)

    def _check(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return
        if isinstance(node, ast.Name):
            if node.id not in self.names and node.id not in CONSTANTS:
                raise ConfigError(
                    f'{self.where}: {self.text!r} names {node.id!r}; it may use the coordinates {self.names},'
                    f' {sorted(CONSTANTS)} and the functions {sorted(FUNCTIONS)}'
                )
            return
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            self._check(node.left)
            self._check(node.right)
            return
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            self._check(node.operand)
            return
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FUNCTIONS
            and len(node.args) == 1
            and not node.keywords
        ):
            self._check(node.args[0])
            return
        raise ConfigError(
            f'{self.where}: {self.text!r}: only numbers, the coordinates {self.names}, {sorted(CONSTANTS)},'
            f' + - * / ** % and the functions {sorted(FUNCTIONS)} (one argument each) are allowed'
        )

    def __call__(self, points):
        values = {name: points[:, i] for i, name in enumerate(self.names)}
        with np.errstate(all='ignore'):  # a NaN or inf is the error below, not a warning lost in the set-up output
            out = np.broadcast_to(np.asarray(self._evaluate(self.tree, values), dtype=np.float64), (len(points),))
        if not np.isfinite(out).all():
            bad = np.flatnonzero(~np.isfinite(out))
            point = dict(zip(self.names, points[bad[0]].tolist()))
            raise ConfigError(
                f'{self.where}: {self.text!r} is NaN or inf at {len(bad)} of {len(points)} drawn point(s), the first'
                f' at {point} (value {out[bad[0]]}); give a value that is finite at every point of the set'
            )
        return out.copy()

    def _evaluate(self, node, values):
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            return values[node.id] if node.id in values else CONSTANTS[node.id]
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](self._evaluate(node.left, values), self._evaluate(node.right, values))
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](self._evaluate(node.operand, values))
        return FUNCTIONS[node.func.id](self._evaluate(node.args[0], values))
