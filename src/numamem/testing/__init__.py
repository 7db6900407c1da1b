"""Test support shipped with numamem: fake sysfs trees and an in-process server.

Client developers use these in their own tests (no root, no /sys, no daemon
install needed); numamem's own tests use them too.
"""
