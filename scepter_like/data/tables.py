"""CsvDataset: a table of numbers (a CSV file with a header row) as a dataset, without code.

Columns become batch keys: ``COLUMNS`` maps a key to one column (a 1-d array) or a list of
columns (stacked into ``[rows, columns]``); by default every column but the label's is
stacked into ``x``.  ``LABEL_COLUMN`` names the class labels, which become the int64 key
``LABEL_KEY`` (``label``): whole numbers (``2``, ``2.0``) as they are, any other text by its place in
``CLASSES`` (default: the file's distinct labels, sorted, which every split shares only when
each holds every class; give CLASSES otherwise).  Features are parsed as numbers and held in
the model's dtype (``ArrayDataset``); ``DTYPES`` sets a key's dtype instead.
"""

import codecs
import csv
import io
import os

import torch

from scepter_like.data.datasets import ArrayDataset, binary_kind
from scepter_like.data.registry import DATASETS
from scepter_like.errors import ConfigError, DataError, suggest

FIRST_ROW_LINE = 2  # the file line of the first data row (the header is line 1), for messages naming a row


def read_csv(path, delimiter, where, encoding='utf-8', encoding_where='ENCODING'):
    """``(header, rows)`` of a CSV file with a header row; a DataError naming ``where`` when it has none, and
    ``encoding_where`` (the config key of ``encoding``; None: no key sets it) when its bytes are not text of that
    encoding."""
    if not os.path.isfile(path):
        raise DataError(f'{where}: file not found: {path}')
    with open(path, 'rb') as f:
        data = f.read()
    try:
        text = data.decode(text_codec(encoding, encoding_where))
    except UnicodeDecodeError as e:
        kind = binary_kind(path)
        if kind:
            raise DataError(f'{where}: {path} is not a CSV text file but {kind}: NpzDataset reads it') from None
        line = data.count(b'\n', 0, e.start) + 1
        fix = (
            f'set {encoding_where} to the encoding it was saved in (cp1252 for a CSV Excel saved on Windows)'
            if encoding_where
            else 'save it as UTF-8 text (Excel: CSV UTF-8)'
        )
        raise DataError(
            f'{where}: {path} is not {encoding} text (byte 0x{data[e.start]:02x} on line {line}); {fix}'
        ) from None
    rows = [row for row in csv.reader(io.StringIO(text, newline=''), delimiter=delimiter) if row]
    if len(rows) < 2:
        raise DataError(f'{path}: a CSV dataset needs a header row and at least one row of data')
    header = [name.strip() for name in rows[0]]
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:  # a name -> column lookup would keep one of them and read it twice
        raise DataError(f'{path}: the header names column(s) {twice} more than once; give each column its own name')
    for number, row in enumerate(rows[1:], FIRST_ROW_LINE):
        if len(row) != len(header):
            raise DataError(f'{path} line {number}: {len(row)} values under {len(header)} column names')
    return header, rows[1:]


def text_codec(encoding, where):
    """The codec that reads text of ``encoding`` (utf-8 as utf-8-sig, which drops the byte order mark Excel
    writes); an unknown encoding is a ConfigError naming ``where``."""
    try:
        name = codecs.lookup(encoding).name
    except (LookupError, TypeError):
        raise ConfigError(f'{where}: unknown text encoding {encoding!r} (e.g. utf-8, cp1252, latin-1)') from None
    return 'utf-8-sig' if name == 'utf-8' else name


MISSING_LABELS = ('', 'nan', 'na', 'n/a', 'null', 'none')  # how tables write a missing value (pandas: '' or NaN)


def feature_number(text, path, line, column, leave_out):
    """``float(text)`` of a feature cell; an empty cell (or NA, null) is a DataError naming it a missing value,
    any other text one saying to encode the column as numbers or to leave it out (``leave_out``: how)."""
    try:
        return float(text)
    except ValueError:
        pass
    where = f'{path} line {line}, column {column!r}'
    if text.strip().lower() in MISSING_LABELS:
        raise DataError(
            f'{where}: {text!r} is a missing value; drop or fill the rows missing it (pandas: df.dropna() or'
            ' df.fillna(...))'
        )
    raise DataError(
        f'{where} holds the text {text!r}: features are numbers; encode the column as numbers (one 0/1 column per'
        f' category: pandas get_dummies) or {leave_out}'
    )


def column_values(header, rows, indices, path, leave_out, stacked=True):
    """The float64 tensor of the columns ``indices`` of ``rows``: ``[rows, columns]``, or ``[rows]`` of one
    column unless ``stacked`` (``feature_number`` refuses a cell that is no number)."""
    numbered = enumerate(rows, FIRST_ROW_LINE)
    values = [[feature_number(row[i], path, line, header[i], leave_out) for i in indices] for line, row in numbered]
    tensor = torch.tensor(values, dtype=torch.float64)
    return tensor if stacked else tensor[:, 0]


class CsvInput:
    """A CSV file given to run_inference (or export) as input, read once; ``arrays`` takes its batch keys by the
    column names the model was trained on, whatever order the file holds them in (as predict() takes a
    DataFrame)."""

    def __init__(self, path, where='--input'):
        self.path = path
        self.header, self.rows = read_csv(path, ',', where, encoding_where=None)

    def arrays(self, columns):
        """``{key: float64 array}`` of each batch key of ``columns`` (key -> column names, as
        ``BaseModel.input_columns``) whose columns the file holds; a key whose columns it lacks altogether (a
        target) is left out, one lacking some of them is a DataError."""
        if not columns:
            raise DataError(
                f'{self.path} is a CSV table, and the model records no table columns to read it by (it was not'
                ' trained on a CsvDataset, or saved before checkpoints recorded them): give an .npz of arrays named'
                " by batch key, or build_solver(training config).predict({'x': DataFrame}), which takes the columns"
                ' by name'
            )
        arrays = {}
        for key, names in columns.items():
            listed = names if isinstance(names, list) else [names]
            lacking = [name for name in listed if name not in self.header]
            if len(lacking) == len(listed):
                continue
            if lacking:
                raise DataError(
                    f'{self.path} lacks the column(s) {lacking} of {key!r}, which the model reads from {listed}'
                    f' (in any order; its columns: {self.header})'
                )
            indices = [self.header.index(name) for name in listed]
            leave_out = 'fix the row: the model was trained on the column as numbers'
            arrays[key] = column_values(
                self.header, self.rows, indices, self.path, leave_out, stacked=isinstance(names, list)
            )
        if not arrays:
            raise DataError(
                f'{self.path} has none of the columns the model was trained on ({columns}); its columns: {self.header}'
            )
        return {key: tensor.numpy() for key, tensor in arrays.items()}


def number_or_none(text):
    """``float(text)``, or None when it is not a number."""
    try:
        return float(text)
    except ValueError:
        return None


def class_indices(labels, classes, path, where, column, features=()):
    """``(int64 class indices, class names in index order)`` of ``labels`` (texts): whole numbers (``3``, ``3.0``) as
    they are (names None), else their place in ``classes`` (default: the labels' sorted).  Numbers that are not
    whole are a regression target, not classes: a DataError showing the COLUMNS that read it with ``features``."""
    missing = [row for row, label in enumerate(labels) if label.lower() in MISSING_LABELS]
    if missing:
        raise DataError(
            f'{path}: the LABEL_COLUMN {column!r} is empty or NaN in {len(missing)} row(s), the first at row'
            f' {missing[0]} (0-based, line {missing[0] + FIRST_ROW_LINE} of the file); drop or fill those rows'
        )
    numbers = [number_or_none(label) for label in labels]
    texts = [row for row, n in enumerate(numbers) if n is None]
    if not classes and 0 < len(texts) < len(labels) / 2:  # text classes sorted as strings would renumber the rest
        raise DataError(
            f'{path} line {texts[0] + FIRST_ROW_LINE}: the LABEL_COLUMN {column!r} holds {labels[texts[0]]!r} among'
            f' numbers ({len(texts)} such cell(s)); fix or drop those rows (text labels must all be text)'
        )
    if not classes and not texts:
        fraction = next((label for label, n in zip(labels, numbers) if not n.is_integer()), None)
        if fraction is not None:
            raise DataError(
                f'{path}: the LABEL_COLUMN {column!r} holds {fraction}, not a class (a whole number or a text);'
                f' a regression target is a column of its own: COLUMNS: {{x: [{", ".join(features)}], y: {column}}}'
                ' (COLUMNS replaces the default x, so it names the features too)'
            )
        return torch.tensor([int(n) for n in numbers], dtype=torch.int64), None
    order = [str(c) for c in classes] or sorted(set(labels))
    index = {name: i for i, name in enumerate(order)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise DataError(f'{path}: label(s) {unknown[:5]} are not in {where} {order}; add them there')
    return torch.tensor([index[label] for label in labels], dtype=torch.int64), order


def default_columns(header, label, where, path):
    """``{'x': every column but the label}``; a DataError for a column without a name: pandas' row index
    (``to_csv`` without ``index=False``) would be read as a feature."""
    unnamed = [i for i, name in enumerate(header) if not name]
    if unnamed:
        raise DataError(
            f'{where}: column {unnamed[0] + 1} of {path} has no name in the header (as pandas writes its row index):'
            ' save the table with df.to_csv(path, index=False), or name the feature columns in COLUMNS'
        )
    return {'x': [name for name in header if name != label]}


def delimiter_hint(header, where):
    """``; set DELIMITER ...`` when ``header`` is one field holding ';' or a tab (a file another delimiter
    separates reads as one column), else ''."""
    if len(header) != 1:
        return ''
    for char, written in ((';', "';'"), ('\t', '"\\t"')):
        if char in header[0]:
            return f'; its values look separated by {written}: set {where}: {written}'
    return ''


@DATASETS.register_class()
class CsvDataset(ArrayDataset):
    FIRST_ROW_LINE = FIRST_ROW_LINE  # (the module's): ArrayDataset's NaN messages name the file line too
    para_dict = {
        'PATH': {
            'value': '',
            'description': 'path of the .csv file (a header row names the columns)',
            'required': True,
        },
        'LABEL_COLUMN': {'value': '', 'description': "column of the class labels ('': none)"},
        'LABEL_KEY': {'value': 'label', 'description': 'batch key of the class labels (int64)'},
        'COLUMNS': {
            'value': {},
            'description': 'batch key -> column or list of columns; {}: x = every column but the label',
        },
        'CLASSES': {'value': [], 'description': 'text labels in class-index order ([]: the sorted distinct labels)'},
        'DTYPES': {'value': {}, 'description': 'batch key -> torch dtype name, e.g. {x: float64}'},
        'DELIMITER': {'value': ',', 'description': 'the character between values'},
        'ENCODING': {
            'value': 'utf-8',
            'description': "the file's text encoding (utf-8 reads a byte order mark too; cp1252: Excel on Windows)",
        },
    }

    def __init__(self, cfg, logger=None):
        path = cfg.PATH
        header, rows = read_csv(path, cfg.DELIMITER, cfg.path_of('PATH'), cfg.ENCODING, cfg.path_of('ENCODING'))
        position = {name: i for i, name in enumerate(header)}

        def column(name, where):
            if name not in position:
                raise DataError(
                    f'{where}: {path} has no column {name!r}{suggest(name, header)} (columns: {header})'
                    + delimiter_hint(header, cfg.path_of('DELIMITER'))
                )
            return position[name]

        label = cfg.LABEL_COLUMN
        if label:
            column(label, cfg.path_of('LABEL_COLUMN'))
        mapping = cfg.COLUMNS.to_dict() if cfg.COLUMNS else default_columns(header, label, cfg.path_of('PATH'), path)
        if not cfg.COLUMNS and logger is not None:
            logger.info(f'{path}: x is the columns {mapping["x"]} (every column but the label; COLUMNS picks them)')
        self.columns = mapping  # batch key -> its column(s), by name (the solver compares the splits')
        arrays = {}
        for key, names in mapping.items():
            where = cfg.COLUMNS.path_of(key) if cfg.COLUMNS else cfg.path_of('COLUMNS')
            if label and label in (names if isinstance(names, list) else [names]):
                raise DataError(
                    f'{where}: reads the LABEL_COLUMN {label!r}, so the model would be given the answer; leave it out'
                )
            indices = [column(name, where) for name in (names if isinstance(names, list) else [names])]
            if cfg.COLUMNS:
                leave_out = f'leave it out of {where}'
            else:  # every column is read, a text label column too when LABEL_COLUMN is not set
                named = ' (if it holds the class labels, name it LABEL_COLUMN)' if not label else ''
                leave_out = f'name the features to read in COLUMNS{named}'
            arrays[key] = column_values(header, rows, indices, path, leave_out, stacked=isinstance(names, list))
        self.classes = None  # text labels' names in class-index order (the solver compares the splits')
        if label:
            labels = [row[position[label]].strip() for row in rows]
            arrays[cfg.LABEL_KEY], self.classes = class_indices(
                labels, cfg.CLASSES, path, cfg.path_of('CLASSES'), label, [name for name in header if name != label]
            )
        super().__init__(arrays, path)
        self.set_dtypes(cfg.DTYPES, cfg.path_of('DTYPES'))
