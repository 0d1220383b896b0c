"""A demo job type that makes the pipeline visible: POST /demo/echo."""

from jobrail.demo.api import router
from jobrail.demo.jobs import batch_sum, echo
from jobrail.modules import Module

module = Module(name="demo", jobs=[echo, batch_sum], routers=[router])
