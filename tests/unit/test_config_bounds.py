"""[limits] max_message_size, consumer_timeout and the types of the others, and [alarms]
memory_high_watermark_absolute from the file."""

import pytest

from broker.core.rabbitmq_lines import make_profile
from broker.config import ConfigError, load_settings


def settings_from(tmp_path, text: str):
    path = tmp_path / "warren.toml"
    path.write_text(text)
    return load_settings(str(path), {})


def test_defaults_are_rabbitmqs(tmp_path):
    settings = settings_from(tmp_path, "")
    # the largest message: the RabbitMQ line's (16 MiB in 4.x, 128 MiB in 3.10)
    assert settings.limits.message_size_limit(settings.profile()) == 16 * 1024 * 1024
    assert settings.limits.message_size_limit(make_profile("3.10", {})) == 128 * 1024 * 1024
    limits = settings.limits
    assert (limits.channel_max, limits.frame_max, limits.handshake_timeout) == (
        2047, 131072, 10.0)
    assert settings.alarms.memory_high_watermark_absolute is None


def test_sizes_are_read_from_the_file(tmp_path):
    settings = settings_from(tmp_path, "[limits]\nmax_message_size = 1000\n"
                                       "[alarms]\nmemory_high_watermark_absolute = 5000000\n")
    assert settings.limits.max_message_size == 1000
    assert settings.alarms.memory_limit(total_memory=64_000_000) == 5_000_000


@pytest.mark.parametrize("text, name", [
    ('[limits]\nmax_message_size = "128MB"\n', "max_message_size"),
    ("[limits]\nmax_message_size = 0\n", "max_message_size"),
    ("[alarms]\nmemory_high_watermark_absolute = -1\n", "memory_high_watermark_absolute"),
    ("[alarms]\nmemory_high_watermark_absolute = 0.5\n", "memory_high_watermark_absolute"),
])
def test_a_size_that_is_not_a_positive_number_of_bytes_is_refused(tmp_path, text, name):
    with pytest.raises(ConfigError, match=f"'{name}' .* must be a positive number of bytes"):
        settings_from(tmp_path, text)


def test_consumer_timeout_defaults_to_rabbitmqs_30_minutes_and_0_turns_it_off(tmp_path):
    assert settings_from(tmp_path, "").limits.consumer_timeout == 1_800_000
    assert settings_from(tmp_path, "[limits]\nconsumer_timeout = 0\n").limits \
        .consumer_timeout == 0


@pytest.mark.parametrize("value", ["-1", "1.5", '"30m"', "true"])
def test_a_consumer_timeout_that_is_not_milliseconds_is_refused(tmp_path, value):
    with pytest.raises(ConfigError, match="'consumer_timeout' .* must be a number of "
                                          r"milliseconds \(0 for no timeout\)"):
        settings_from(tmp_path, f"[limits]\nconsumer_timeout = {value}\n")


@pytest.mark.parametrize("text, words", [
    ('channel_max = "2047"', "'channel_max' .* must be an integer, got '2047'"),
    ("heartbeat = 1.5", "'heartbeat' .* must be an integer, got 1.5"),
    ("frame_max = true", "'frame_max' .* must be an integer, got True"),
    ('handshake_timeout = "10s"', "'handshake_timeout' .* must be a number, got '10s'"),
])
def test_a_limit_of_the_wrong_type_is_refused(tmp_path, text, words):
    with pytest.raises(ConfigError, match=words):
        settings_from(tmp_path, f"[limits]\n{text}\n")


def test_a_whole_number_of_seconds_is_a_handshake_timeout(tmp_path):
    assert settings_from(tmp_path, "[limits]\nhandshake_timeout = 3\n").limits \
        .handshake_timeout == 3
