"""The controller manager: the control loops that turn stored intent into running pods and keep them
there (`controlplane/controllers/README.md`). Each loop is an ordinary API client on the shared library
(informers, work queue, event recorder, leader election), so it runs against any API server."""
