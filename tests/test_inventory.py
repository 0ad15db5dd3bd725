import pytest

from oltunes.errors import ConfigError
from oltunes.inventory import CATALOG, load_inventory, pools_from_data


def test_shipped_inventories_load(repo_root):
    local = load_inventory(repo_root / "infra" / "inventory.local.yaml")
    assert [p.cpu_set for p in local] == [(0,), (0, 1)]
    cluster = load_inventory(repo_root / "infra" / "inventory.yaml")
    assert {p.accelerator.name for p in cluster} >= {"t4", "v100", "a100", "h100", "l4", "cpu"}


def test_inline_accelerator_and_catalog_lookup():
    pools = pools_from_data(
        {"pools": [{"name": "x", "accelerator": {"name": "mi300", "memory_gb": 192, "idle_w": 90, "max_w": 750}, "count": 2},
                   {"name": "y", "accelerator": "t4", "count": 1}]}
    )
    assert pools[0].accelerator.max_w == 750
    assert pools[1].accelerator == CATALOG["t4"]


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"pools": [{"name": "x", "accelerator": "tpu9", "count": 1}]}, "pools[0].accelerator"),
        ({"pools": [{"name": "x", "accelerator": "t4", "count": 0}]}, "count"),
        ({"pools": [{"name": "x", "accelerator": "t4"}]}, "pools.0.count"),
        ({"pools": [{"name": "x", "accelerator": "t4", "count": 1, "colour": "red"}]}, "colour"),
        ({"pools": [{"name": "x", "accelerator": "t4", "count": 1}, {"name": "x", "accelerator": "l4", "count": 1}]}, "unique"),
    ],
)
def test_bad_inventory_names_the_field(data, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        pools_from_data(data)


def test_missing_inventory_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_inventory(tmp_path / "nope.yaml")
