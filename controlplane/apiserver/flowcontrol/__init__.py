"""API priority and fairness (upstream's k8s.io/apiserver/pkg/util/flowcontrol): requests are
classified by FlowSchemas into priority levels, each with its share of the server's concurrency and
its queues, so a flood from one client gets 429s while the system and the administrators keep being
served. defaults.py holds upstream's bootstrap objects, validation.py their rules, maintainer.py keeps
them in the store, requestinfo.py and classify.py classify a request, queueset.py is a level's seats
and queues, dispatcher.py the middleware, metrics.py the apiserver_flowcontrol_* metrics."""
