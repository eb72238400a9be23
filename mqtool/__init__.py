"""mqtool: offline decoder, checker and repair kit for Apache RocketMQ store directories."""

__version__ = "0.1.0"
