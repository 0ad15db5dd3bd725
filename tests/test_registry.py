import pytest

from oltunes.errors import ConfigError
from oltunes.registry import Registered


class Shape(Registered, root=True):
    def __init__(self, size: int = 1):
        self.size = size


class Square(Shape, name="square"):
    pass


class Circle(Shape, name="circle"):
    pass


def test_make_by_name_passes_arguments():
    s = Shape.make("square", size=3)
    assert isinstance(s, Square) and s.size == 3
    assert Shape.known() == ["circle", "square"]


def test_unknown_name_lists_known_ones():
    with pytest.raises(ConfigError, match="known: circle, square"):
        Shape.make("hexagon")


def test_duplicate_name_refused():
    with pytest.raises(ConfigError, match="already registered"):
        class Square2(Shape, name="square"):
            pass


def test_separate_roots_have_separate_tables():
    class Other(Registered, root=True):
        pass

    class Thing(Other, name="square"):
        pass

    assert Other.known() == ["square"] and "square" in Shape.known()
