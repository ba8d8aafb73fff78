import pytest
import yaml

from scepter_like.config import Config, apply_overrides, load_yaml, parse_override, resolve_references, value_text
from scepter_like.errors import ConfigError


def write(path, text):
    path.write_text(text)
    return str(path)


def test_access_styles():
    cfg = Config({'A': {'B': 1}, 'L': [{'N': 'x'}]})
    assert cfg.A.B == 1 and cfg['A']['B'] == 1 and cfg.get('Z', 5) == 5 and 'A' in cfg
    assert cfg.L[0].N == 'x'
    assert cfg.L[0].path == 'L[0]' and cfg.A.path == 'A'
    assert cfg.A.root is cfg


def test_load_with_base_merges_dicts_and_replaces_lists(tmp_path):
    write(tmp_path / 'base.yaml', 'SOLVER:\n  A: 1\n  B: {X: 1, Y: 2}\n  L: [1, 2, 3]\n')
    sub = tmp_path / 'sub'
    sub.mkdir()
    child = write(sub / 'child.yaml', '_BASE_: ../base.yaml\nSOLVER:\n  B: {Y: 20}\n  L: [9]\n')
    cfg = Config(cfg_file=child)
    assert cfg.to_dict() == {'SOLVER': {'A': 1, 'B': {'X': 1, 'Y': 20}, 'L': [9]}}


def test_scepter_base_keys_and_config_methods(tmp_path):
    """scepter's _BASE, _BASE_RUN and _BASE_MODEL merge in that order; get_lowercase_dict, cfg_dict, get_plain_cfg
    (which scepter's diffusion solver calls) give plain dicts."""
    write(tmp_path / 'run.yaml', 'SOLVER:\n  MAX_EPOCHS: 2\n  MODEL: {NAME: A, DEPTH: 1}\n')
    write(tmp_path / 'model.yaml', 'SOLVER:\n  MODEL: {NAME: B}\n')
    child = write(tmp_path / 'child.yaml', '_BASE_RUN: run.yaml\n_BASE_MODEL: model.yaml\nSOLVER: {MAX_EPOCHS: 3}\n')
    cfg = Config(cfg_file=child)
    assert cfg.to_dict() == {'SOLVER': {'MAX_EPOCHS': 3, 'MODEL': {'NAME': 'B', 'DEPTH': 1}}}
    single = write(tmp_path / 'single.yaml', '_BASE: ./run.yaml\nSOLVER: {MAX_EPOCHS: 4}\n')
    assert Config(cfg_file=single).SOLVER.to_dict() == {'MAX_EPOCHS': 4, 'MODEL': {'NAME': 'A', 'DEPTH': 1}}
    model = cfg.SOLVER.MODEL
    assert model.get_lowercase_dict() == {'name': 'B', 'depth': 1}
    assert cfg.get_uppercase_dict() == cfg.cfg_dict == cfg.to_dict()
    assert Config.get_plain_cfg({'m': model, 'l': [model]}) == {'m': model.to_dict(), 'l': [model.to_dict()]}


def test_overrides_including_list_indices_and_new_keys():
    cfg = Config({'SOLVER': {'MAX_EPOCHS': 3, 'HOOKS': [{'NAME': 'A'}, {'NAME': 'B', 'I': 1}]}})
    apply_overrides(cfg, ['SOLVER.MAX_EPOCHS=5', 'SOLVER.HOOKS.1.I=7', 'SOLVER.HOOKS.0.NEW=[1, 2]', 'SOLVER.X.Y=ok'])
    assert cfg.SOLVER.MAX_EPOCHS == 5
    assert cfg.SOLVER.HOOKS[1].I == 7
    assert cfg.SOLVER.HOOKS[0].NEW == [1, 2]
    assert cfg.SOLVER.X.Y == 'ok'
    assert cfg.SOLVER.HOOKS[1].path == 'SOLVER.HOOKS[1]'
    apply_overrides(cfg, ['SOLVER.HOOKS.1={NAME: C}'])
    assert cfg.SOLVER.HOOKS[1].NAME == 'C' and cfg.SOLVER.HOOKS[1].path == 'SOLVER.HOOKS[1]'


@pytest.mark.parametrize(
    'override, match',
    [
        ('SOLVER.MAX_EPOCHS', "no '='"),
        ('SOLVER.HOOKS.5.I=1', 'outside the list|not an index'),
        ('SOVLER.X=1', 'did you mean SOLVER'),
        ('SOLVER.MAX_EPOCHS.X=1', 'not a mapping'),
        ('SOLVER..X=1', 'empty key'),
        ('SOLVER.MAX_EPOCHS = 1', r"^override .*: no spaces around '='; write SOLVER.MAX_EPOCHS=1$"),
    ],
)
def test_bad_overrides(override, match):
    cfg = Config({'SOLVER': {'MAX_EPOCHS': 3, 'HOOKS': [{'NAME': 'A'}]}})
    with pytest.raises(ConfigError, match=match):
        apply_overrides(cfg, [override])


def test_dump_round_trips(tmp_path):
    data = {'ENV': {'SEED': 1}, 'SOLVER': {'NAME': 'S', 'L': [{'NAME': 'h', 'X': 1.5}], 'N': None, 'B': True}}
    cfg = Config(data)
    text = cfg.dump()
    assert yaml.safe_load(text) == data
    again = Config(cfg_file=write(tmp_path / 'x.yaml', text))
    assert again == cfg


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match='not found'):
        Config(cfg_file=str(tmp_path / 'missing.yaml'))
    with pytest.raises(ConfigError, match='invalid YAML.*line 3'):
        Config(cfg_file=write(tmp_path / 'bad.yaml', 'A: 1\nB: [1, 2\n'))
    with pytest.raises(ConfigError, match='top level must be a mapping'):
        Config(cfg_file=write(tmp_path / 'list.yaml', '- 1\n- 2\n'))
    with pytest.raises(ConfigError, match='cycle'):
        Config(cfg_file=write(tmp_path / 'self.yaml', '_BASE_: self.yaml\nA: 1\n'))


def test_safe_loader_only(tmp_path):
    path = write(tmp_path / 'evil.yaml', "A: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match='invalid YAML'):
        Config(cfg_file=path)


def test_delete_key_replaces_an_inherited_mapping(tmp_path):
    write(tmp_path / 'base.yaml', 'SOLVER:\n  MODEL: {NAME: A, BACKBONE: {NAME: MLP, IN_DIM: 64}}\n')
    child = write(
        tmp_path / 'child.yaml', '_BASE_: base.yaml\nSOLVER:\n  MODEL:\n    BACKBONE: {_delete_: true, NAME: ConvNet}\n'
    )
    assert Config(cfg_file=child).to_dict() == {'SOLVER': {'MODEL': {'NAME': 'A', 'BACKBONE': {'NAME': 'ConvNet'}}}}
    bad = write(tmp_path / 'bad.yaml', '_BASE_: {x: 1}\n')
    with pytest.raises(ConfigError, match='_BASE_ must be a file path or a list of them'):
        Config(cfg_file=bad)


def test_delete_key_in_an_override_says_a_mapping_given_there_replaces_the_whole_one():
    """_delete_ belongs to _BASE_ merging; the command line's mapping replaces already (and is not merged)."""
    cfg = Config({'SOLVER': {'SETS': {'pde': {'COUNT': 1}, 'bc': {'COUNT': 2}}}})
    assert apply_overrides(cfg, ['SOLVER.SETS={pde: {COUNT: 3}}']).SOLVER.SETS.to_dict() == {'pde': {'COUNT': 3}}
    with pytest.raises(
        ConfigError,
        match=r"^override 'SOLVER\.SETS=\{_delete_: true, pde: \{COUNT: 3\}\}': a mapping given on the command line"
        r' already replaces SOLVER\.SETS whole; leave out _delete_, which is for a YAML file with _BASE_',
    ):
        apply_overrides(cfg, ['SOLVER.SETS={_delete_: true, pde: {COUNT: 3}}'])
    with pytest.raises(ConfigError, match=r'replaces SOLVER whole; leave out _delete_'):  # deeper in the value
        apply_overrides(cfg, ['SOLVER={SETS: {_delete_: true}}'])
    with pytest.raises(
        ConfigError,
        match=r"^override 'SOLVER\.SETS\._delete_=true': _delete_ is for a YAML file with _BASE_ .*; on the command"
        r' line give the mapping whole, which replaces it: SOLVER\.SETS=\{\.\.\.\}$',
    ):
        apply_overrides(cfg, ['SOLVER.SETS._delete_=true'])


def test_override_appends_to_a_list():
    cfg = Config({'SOLVER': {'HOOKS': [{'NAME': 'A'}]}})
    apply_overrides(cfg, ['SOLVER.HOOKS+={NAME: B}', 'SOLVER.HOOKS+={NAME: C}'])
    assert [h.NAME for h in cfg.SOLVER.HOOKS] == ['A', 'B', 'C'] and cfg.SOLVER.HOOKS[2].path == 'SOLVER.HOOKS[2]'
    apply_overrides(cfg, ['SOLVER.HOOKS+={NAME: D}', 'SOLVER.HOOKS.3.KEY=1'])  # a later word sets a key of the new item
    assert cfg.SOLVER.HOOKS[3].to_dict() == {'NAME': 'D', 'KEY': 1}
    apply_overrides(cfg, ['SOLVER.HOOKS+=[{NAME: E}, {NAME: F}]'])  # a list extends, as Python's +=
    assert [h.NAME for h in cfg.SOLVER.HOOKS][-2:] == ['E', 'F']
    dims = apply_overrides(Config({'SOLVER': {'DIMS': [64]}}), ['SOLVER.DIMS+=[32, 16]']).SOLVER.DIMS
    assert dims == [64, 32, 16]  # it appended [32, 16] as one item, and the model refused it
    with pytest.raises(ConfigError, match=r'\+= appends to a list, and SOLVER.HOOKS.0 is not one'):
        apply_overrides(cfg, ['SOLVER.HOOKS.0+=1'])


def test_references_resolve_after_overrides_keep_types_and_report_cycles():
    cfg = Config(
        {'SOLVER': {'MAX_EPOCHS': 30, 'S': {'T_MAX': '${SOLVER.MAX_EPOCHS}', 'NAME': 'run-${SOLVER.MAX_EPOCHS}'}}}
    )
    apply_overrides(cfg, ['SOLVER.MAX_EPOCHS=3'])
    resolve_references(cfg)
    assert cfg.SOLVER.S.T_MAX == 3 and cfg.SOLVER.S.NAME == 'run-3'
    with pytest.raises(ConfigError, match=r'the references form a cycle \(A -> B -> A\)'):
        resolve_references(Config({'A': '${B}', 'B': '${A}'}))
    with pytest.raises(ConfigError, match=r'\$\{SOLVER.MAX_EPOCH\} \(in X\): the config has no SOLVER.MAX_EPOCH'):
        resolve_references(Config({'SOLVER': {'MAX_EPOCHS': 1}, 'X': '${SOLVER.MAX_EPOCH}'}))


def test_an_error_about_a_referenced_value_names_the_reference():
    """MAX_EPOCHS -1 (train by MAX_STEPS) leaves T_MAX: ${SOLVER.MAX_EPOCHS} at -1: the error says where -1 came
    from, also on a copy of the config (--print-config checks one)."""
    import copy

    from scepter_like.opt import LR_SCHEDULERS

    cfg = Config(
        {'SOLVER': {'MAX_EPOCHS': -1, 'LR_SCHEDULER': {'NAME': 'CosineAnnealingLR', 'T_MAX': '${SOLVER.MAX_EPOCHS}'}}}
    )
    resolve_references(cfg)
    assert cfg.SOLVER.LR_SCHEDULER.reference_of('T_MAX') == '${SOLVER.MAX_EPOCHS}'
    assert cfg.SOLVER.LR_SCHEDULER.reference_of('NAME') == ''
    message = r'SOLVER.LR_SCHEDULER.T_MAX (written ${SOLVER.MAX_EPOCHS}): must be at least 1, got -1'
    for tree in (cfg, copy.deepcopy(cfg)):
        with pytest.raises(ConfigError) as raised:
            LR_SCHEDULERS.resolve(tree.SOLVER.LR_SCHEDULER)
        assert str(raised.value) == message


@pytest.mark.parametrize(
    'data, match',
    [
        ({'SOLVER': {'EXTRA': {'A': '${SOLVER.EXTRA}'}}}, r'cycle \(SOLVER.EXTRA.A -> SOLVER.EXTRA\)'),
        ({'SOLVER': {'H': [{'N': 1}, {'I': '${SOLVER.H}'}]}}, r'cycle \(SOLVER.H\[1\].I -> SOLVER.H\)'),
        ({'X': '${SOLVER}', 'SOLVER': {'A': 'x_${X}'}}, r'cycle \(X -> SOLVER.A -> X\)'),
        ({'L': ['${L.0}']}, r'cycle \(L\[0\] -> L\[0\]\)'),
    ],
)
def test_a_reference_to_itself_or_a_container_holding_it_is_a_cycle(data, match):
    """Walking into a referenced mapping kept only the child's place, so a reference back to it recursed forever."""
    with pytest.raises(ConfigError, match=match):
        resolve_references(Config(data))


def test_references_into_a_sibling_of_a_referenced_mapping_resolve():
    cfg = resolve_references(Config({'X': '${A}', 'A': {'B': '${A.C}', 'C': 1}}))
    assert cfg.X.to_dict() == {'B': 1, 'C': 1} and cfg.A.B == 1


def test_a_nested_reference_is_an_error_naming_the_key():
    """The inner reference was put in and the outer one left as literal text (a file named log_${...}.txt)."""
    cfg = Config({'SOLVER': {'KEYS': ['MAX_EPOCHS'], 'MAX_EPOCHS': 3, 'F': 'log_${SOLVER.${SOLVER.KEYS.0}}'}})
    with pytest.raises(ConfigError, match=r'^SOLVER.F: .* nested references are not supported'):
        resolve_references(cfg)


def test_a_reference_to_a_missing_key_says_defaults_are_not_read():
    with pytest.raises(ConfigError, match='references read what the files and overrides write, not the declared'):
        resolve_references(Config({'SOLVER': {'A': '${SOLVER.NUM_WORKERS}'}}))


TRICKY_STRINGS = [
    '2e5',
    '1e-3',
    '.5',
    'null',
    'true',
    '010',
    '0o10',
    '0x1F',
    '30:00',
    'yes',
    'NO',
    '~',
    '',
    '.inf',
    '1.',
]


def test_dump_quotes_every_string_the_loader_reads_as_something_else(tmp_path):
    """The stock dumper wrote '2e5' and '1e-3' bare, which the loader reads as floats: config.yaml did not rerun."""
    data = {'SOLVER': {'S': TRICKY_STRINGS, 'N': [1, 1.5, 1e-05, 2e5, None, True, 8]}}
    text = Config(data).dump()
    assert load_yaml(text) == data
    assert Config(cfg_file=write(tmp_path / 'x.yaml', text)) == Config(data)
    assert [parse_override(f'A={value_text(s)}')[1] for s in TRICKY_STRINGS] == TRICKY_STRINGS


@pytest.mark.parametrize(
    'text, value',
    [
        ('010', 10),
        ('0123', 123),
        ('0o10', 8),
        ('0x10', 16),
        ('-7', -7),
        ('30:00', '30:00'),
        ('1_000', '1_000'),
        ('30:00.5', '30:00.5'),
        ('1_000.5', '1_000.5'),
        ('-.5', -0.5),
        ('1.', 1.0),
    ],
)
def test_numbers_are_read_as_yaml_1_2_core_schema(text, value):
    """YAML 1.1 read 010 as octal 8, 30:00 as base-60 1800 and 30:00.5 as 1800.5."""
    assert load_yaml(f'A: {text}') == {'A': value}
    assert parse_override(f'A={text}')[1] == value


def test_appending_to_a_list_the_file_does_not_write_says_how_to_set_it_whole():
    """It said 'SOLVER.EVAL_HOOKS is not one', as if the key held something else."""
    with pytest.raises(
        ConfigError,
        match=r'the file does not write SOLVER.EVAL_HOOKS.* set it whole: SOLVER.EVAL_HOOKS=\[\{NAME: T\}\]',
    ):
        apply_overrides(Config({'SOLVER': {'NAME': 'S'}}), ['SOLVER.EVAL_HOOKS+={NAME: T}'])


def test_numpy_scalars_are_the_python_numbers_they_hold():
    """A value computed with numpy (``np.logspace(...)[i]``, ``np.arange(...)[i]``, ``list(np.array(...))``) is taken
    as the Python number it holds, where the config is made: the declared-type checks take it and it dumps."""
    import numpy as np

    from scepter_like.registry import coerce_value

    cfg = Config({'LR': np.logspace(-3, -1, 3)[1], 'E': np.arange(1, 5)[2], 'H': list(np.array([16, 8]))})
    cfg['B'] = np.int32(16)
    cfg['S'] = {'ON': np.bool_(True), 'D': np.array(0.5), 'N': np.str_('adam')}
    plain = cfg.to_dict()
    assert plain == {'LR': 0.01, 'E': 3, 'H': [16, 8], 'B': 16, 'S': {'ON': True, 'D': 0.5, 'N': 'adam'}}
    assert [type(v) for v in (plain['LR'], plain['E'], plain['B'], *plain['H'], *plain['S'].values())] == [
        float,
        int,
        int,
        int,
        int,
        bool,
        float,
        str,
    ]
    assert load_yaml(cfg.dump()) == plain
    assert coerce_value(cfg.E, {'value': 10}, 'SOLVER.MAX_EPOCHS') == 3
    assert isinstance(Config({'X': np.array([1, 2])}).X, np.ndarray)  # an array stays one: the registry says so
    with pytest.raises(ConfigError, match=r'H: expected a list .*got ndarray of shape \(2,\); give a list of numbers'):
        coerce_value(np.array([16, 8]), {'value': [256, 256]}, 'H')
