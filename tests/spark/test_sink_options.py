"""The sink's options are checked on the driver, before any task starts: a
token the gateway could never accept, a timeout that is not a positive
number of seconds and a gateway that is not host:port are refused in one
message rather than failing every task. No Spark session is started."""

from __future__ import annotations

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from epto.spark._client import MAX_TOKEN
from epto.spark._sink import _Settings

SCHEMA = StructType([StructField("value", StringType())])


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"token": "t" * (MAX_TOKEN + 1)}, f"token has at most {MAX_TOKEN} bytes"),
        ({"timeout": "0"}, "timeout must be a positive number of seconds, not '0'"),
        ({"timeout": "-1"}, "not '-1'"),
        ({"timeout": "nan"}, "not 'nan'"),
        ({"timeout": "inf"}, "not 'inf'"),
        ({"timeout": "soon"}, "not 'soon'"),
        ({"gateway": "nohost"}, "gateway address must be host:port"),
    ],
)
def test_bad_options_are_refused_on_the_driver(options: dict[str, str], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        _Settings({"gateway": "127.0.0.1:7600", **options}, SCHEMA)


def test_good_options_pass() -> None:
    settings = _Settings(
        {"gateway": "127.0.0.1:7600", "token": "t" * MAX_TOKEN, "timeout": "2.5"}, SCHEMA
    )
    assert settings.timeout == 2.5 and len(settings.token) == MAX_TOKEN
