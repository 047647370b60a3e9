"""Examples of every JSON body the API takes or answers, by schema, for `/openapi.json`.

One example per schema, reused by every operation that names it (a list answers a list of
it); tests/api/test_contract.py checks each against its schema.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema

# Every step kind at work: at most three runs a day per subscriber, the comments of ten
# minutes on one post gathered into one in-app note, then an email if it was not read in an hour.
WORKFLOW_STEPS = [
    {"throttle": {"limit": 3, "window": "1d"}},
    {"digest": {"window": "10m", "key": "{{ post_id }}"}},
    {"send": {"channel": "in_app", "template": "new-comments"}},
    {"delay": {"for": "1h"}},
    {"branch": {"unless": {"was": "read"}}},
    {"send": {"channel": "email", "template": "new-comments-email"}},
]

EXAMPLES: dict[str, Any] = {
    "Accepted": {
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
        "status": "accepted",
    },
    "Batch": {
        "accepted": 2,
        "category": None,
        "channel": "email",
        "counts": {"accepted": 2},
        "created_at": "2030-01-02T09:30:05.000000+00:00",
        "id": "c2a7e9d4-1f58-4b36-8e0a-7d3c5b9f2e14",
        "priority": "bulk",
        "rejected": 1,
        "scheduled_at": None,
        "template": None,
        "template_version": None,
        "test": False,
    },
    "BatchAccepted": {
        "accepted": 2,
        "batch_id": "c2a7e9d4-1f58-4b36-8e0a-7d3c5b9f2e14",
        "rejected": [{"errors": {"email": ["Not a valid email address."]}, "index": 1}],
    },
    "BatchSend": {
        "channel": "email",
        "content": {"subject": "News", "text": "Issue 12 is out."},
        "recipients": [{"email": "ada@example.com"}, {"email": "not-an-address"}, {"email": "bo@example.com"}],
    },
    "Changed": {"changed": 0, "total": 1, "unread": 0},
    "Delivery": {
        "id": "6a2f8c1d-4e9b-4b70-8d3a-2c5e7f9a1b36",
        "webhook_id": "msg_2Xk9Pq7RvT3wY5zA",
        "status": "delivered",
        "events": [
            {
                "id": "delivered_5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
                "type": "delivered",
                "message_id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
                "at": "2030-01-02T09:30:09.000000+00:00",
            }
        ],
        "attempts": [
            {
                "at": "2030-01-02T09:30:10.000000+00:00",
                "status_code": 503,
                "error": "HTTP 503",
                "response": "Service Unavailable",
                "duration_ms": 41,
            },
            {
                "at": "2030-01-02T09:30:40.000000+00:00",
                "status_code": 200,
                "error": None,
                "response": "ok",
                "duration_ms": 23,
            },
        ],
        "next_attempt_at": None,
        "delivered_at": "2030-01-02T09:30:40.000000+00:00",
        "created_at": "2030-01-02T09:30:09.000000+00:00",
    },
    "DeliveryPage": {
        "items": [
            {
                "id": "6a2f8c1d-4e9b-4b70-8d3a-2c5e7f9a1b36",
                "webhook_id": "msg_2Xk9Pq7RvT3wY5zA",
                "status": "delivered",
                "events": [
                    {
                        "id": "delivered_5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
                        "type": "delivered",
                        "message_id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
                        "at": "2030-01-02T09:30:09.000000+00:00",
                    }
                ],
                "attempts": [
                    {
                        "at": "2030-01-02T09:30:10.000000+00:00",
                        "status_code": 503,
                        "error": "HTTP 503",
                        "response": "Service Unavailable",
                        "duration_ms": 41,
                    },
                    {
                        "at": "2030-01-02T09:30:40.000000+00:00",
                        "status_code": 200,
                        "error": None,
                        "response": "ok",
                        "duration_ms": 23,
                    },
                ],
                "next_attempt_at": None,
                "delivered_at": "2030-01-02T09:30:40.000000+00:00",
                "created_at": "2030-01-02T09:30:09.000000+00:00",
            }
        ],
        "next_cursor": None,
    },
    "Digest": {
        "generated_at": "2030-01-02T09:30:04.000000+00:00",
        "since": "2030-01-01T09:30:04.000000+00:00",
        "project": None,
        "counts": [
            {"project": "acme", "channel": "email", "status": "delivered", "count": 1180},
            {"project": "acme", "channel": "email", "status": "failed", "count": 4},
        ],
        "totals": {"delivered": 1180, "failed": 4},
        "throughput": {"last_minute": 12, "last_hour": 640},
        "queues": [
            {"name": "prepare.transactional", "depth": 0},
            {"name": "deliver.postmark.transactional", "depth": 2},
        ],
        "lanes": [
            {"name": "deliver.postmark.transactional", "status": "ready", "count": 37, "oldest_age_seconds": 1.8}
        ],
        "providers": [
            {
                "breaker": "closed",
                "breaker_failures": 0,
                "breaker_seconds_left": None,
                "channels": ["email"],
                "name": "postmark",
                "paused": False,
                "paused_reason": None,
                "paused_seconds_left": None,
                "primary_for": ["email"],
                "rate_per_sec": None,
            }
        ],
        "dead_letters": {"total": 3, "by_project": [{"project": "acme", "count": 3}]},
        "quotas": [
            {
                "project": "acme",
                "channel": "email",
                "used": 1184,
                "limit": 500000,
                "remaining": 498816,
                "resets_at": "2030-01-03T00:00:00+00:00",
            }
        ],
    },
    "ImportResult": {
        "created": 1,
        "rejected": [{"errors": {"email": ["Not a valid email address."]}, "index": 1}],
        "updated": 0,
    },
    "InboundAnswer": {"received": 3, "applied": 2, "duplicates": 1, "unmatched": 0},
    "InboxCount": {"total": 1, "unread": 1},
    "InboxItem": {
        "archived_at": None,
        "body": "It is on its way.",
        "category": "orders",
        "created_at": "2030-01-02T09:30:05.000000+00:00",
        "data": None,
        "id": "3d8b6f2a-0c4e-4a71-9b5e-8f1d2c7a6e03",
        "read_at": "2030-01-02T09:30:06.000000+00:00",
        "status": "read",
        "title": "Your order shipped",
    },
    "InboxPage": {
        "items": [
            {
                "archived_at": None,
                "body": "It is on its way.",
                "category": "orders",
                "created_at": "2030-01-02T09:30:05.000000+00:00",
                "data": None,
                "id": "3d8b6f2a-0c4e-4a71-9b5e-8f1d2c7a6e03",
                "read_at": None,
                "status": "unread",
                "title": "Your order shipped",
            }
        ],
        "next_cursor": None,
    },
    "Key": {
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "id": "0f6c3e8a-2b9d-4c57-a1e4-6d7b8c9f0a12",
        "key": "tid_live_3q9Zk7RmV0pX2bN8sT4wY6cA1eG5hJ7kL9nP0rS2uW4",
        "kind": "live",
        "name": "backend",
        "prefix": "tid_live_3q9Z",
    },
    "KeyCreate": {"name": "backend", "kind": "live"},
    "LogPage": {
        "items": [
            {
                "at": "2030-01-02T09:30:05.000000+00:00",
                "batch_id": None,
                "channel": "email",
                "data": {"provider": "postmark", "provider_message_id": "0100018c-5f2a-7b3e-a1c4-postmark"},
                "id": "sent_5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
                "message_id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
                "subscriber_id": None,
                "type": "sent",
            }
        ],
        "next_cursor": None,
    },
    "Message": {
        "attempts": 1,
        "batch_id": None,
        "category": None,
        "channel": "email",
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "engagement": {"clicks": 0, "links": [], "opens": 0},
        "error": None,
        "events": [
            {"at": "2030-01-02T09:30:04.000000+00:00", "data": {}, "type": "accepted"},
            {"at": "2030-01-02T09:30:05.000000+00:00", "data": {}, "type": "ready"},
            {"at": "2030-01-02T09:30:05.000000+00:00", "data": {"attempt": 1}, "type": "sending"},
            {
                "at": "2030-01-02T09:30:05.000000+00:00",
                "data": {"provider": "postmark", "provider_message_id": "0100018c-5f2a-7b3e-a1c4-postmark"},
                "type": "sent",
            },
        ],
        "id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
        "metadata": {"order": "17"},
        "priority": "transactional",
        "provider": "postmark",
        "provider_message_id": "0100018c-5f2a-7b3e-a1c4-postmark",
        "scheduled_at": None,
        "sent_at": "2030-01-02T09:30:05.000000+00:00",
        "status": "sent",
        "subscriber_id": None,
        "template": None,
        "template_version": None,
        "to": {"email": "ada@example.com"},
        "updated_at": "2030-01-02T09:30:05.000000+00:00",
    },
    "MessagePage": {
        "items": [
            {
                "attempts": 1,
                "batch_id": None,
                "category": None,
                "channel": "email",
                "created_at": "2030-01-02T09:30:04.000000+00:00",
                "error": None,
                "id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
                "metadata": {"order": "17"},
                "priority": "transactional",
                "provider": "postmark",
                "provider_message_id": "0100018c-5f2a-7b3e-a1c4-postmark",
                "scheduled_at": None,
                "sent_at": "2030-01-02T09:30:05.000000+00:00",
                "status": "sent",
                "subscriber_id": None,
                "template": None,
                "template_version": None,
                "to": {"email": "ada@example.com"},
                "updated_at": "2030-01-02T09:30:05.000000+00:00",
            }
        ],
        "next_cursor": None,
    },
    "Pause": {"seconds": 600, "reason": "Provider incident 4521"},
    "Preferences": {
        "categories": {"marketing": {"email": False}},
        "channels": {"sms": False},
        "quiet_hours": {"end": "07:00", "start": "22:00"},
    },
    "Preview": {"data": {"name": "Ada"}, "locale": "de"},
    "PreviewOut": {"locale": "de", "subject": "Willkommen, Ada", "text": "Hallo Ada, willkommen bei Acme."},
    "Project": {
        "channels": ["email", "sms", "in_app", "webhook"],
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "id": "acme",
        "name": "Acme",
        "rate_limit_per_min": 6000,
        "settings": {
            "category_defaults": {},
            "daily_quota": {"email": 500000, "sms": 2000},
            "messages_per_min": 20000,
            "quiet_hours": None,
            "quota_timezone": "Europe/London",
            "required_categories": ["security"],
            "retention_days": 30,
            "tracking": {"clicks": False, "opens": False, "transactional": True},
            "verified_senders": [],
            "webhook_allowed_networks": [],
        },
    },
    "ProjectCreate": {
        "id": "acme",
        "name": "Acme",
        "channels": ["email", "sms", "in_app", "webhook"],
        "rate_limit_per_min": 6000,
        "settings": {
            "required_categories": ["security"],
            "quota_timezone": "Europe/London",
            "daily_quota": {"email": 500000, "sms": 2000},
            "messages_per_min": 20000,
        },
    },
    "ProjectCreated": {
        "channels": ["email", "sms", "in_app", "webhook"],
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "id": "acme",
        "name": "Acme",
        "rate_limit_per_min": 6000,
        "settings": {
            "category_defaults": {},
            "daily_quota": {"email": 500000, "sms": 2000},
            "messages_per_min": 20000,
            "quiet_hours": None,
            "quota_timezone": "Europe/London",
            "required_categories": ["security"],
            "retention_days": 30,
            "tracking": {"clicks": False, "opens": False, "transactional": True},
            "verified_senders": [],
            "webhook_allowed_networks": [],
        },
        "webhook_signing_secret": "whsec_MfKQ9r8GKYqWgpfgn1NT7jCZmQkHL3JqXa7oXN2XJ0I=",
    },
    "ProjectUpdate": {"name": "Acme Ltd", "rate_limit_per_min": 12000},
    "ProviderAccount": {
        "provider": "postmark",
        "keys": ["POSTMARK_FROM", "POSTMARK_SERVER_TOKEN"],
        "readable": True,
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "updated_at": "2030-01-02T09:30:04.000000+00:00",
        "paused": False,
        "paused_reason": None,
        "paused_seconds_left": None,
    },
    "ProviderAccountInput": {
        "settings": {
            "POSTMARK_SERVER_TOKEN": "b7e1c3d9-0a4f-4e2b-9c8d-1f6a5e3b7c20",
            "POSTMARK_FROM": "billing@acme.example",
        }
    },
    "ProviderState": {
        "breaker": "closed",
        "breaker_failures": 0,
        "breaker_seconds_left": None,
        "channels": ["email"],
        "name": "postmark",
        "paused": True,
        "paused_reason": "Provider incident 4521",
        "paused_seconds_left": 599.997,
        "primary_for": ["email"],
        "rate_per_sec": None,
    },
    "Requeue": {
        "project": "acme",
        "channel": "email",
        "since": "2030-01-01T00:00:00Z",
        "requested_by": "ops@acme.example",
    },
    "Requeued": {"requeued": 3},
    "Send": {
        "channel": "email",
        "to": {"email": "ada@example.com"},
        "content": {"subject": "Your order", "text": "It is on its way."},
        "metadata": {"order": "17"},
    },
    "SigningSecret": {
        "previous_secret_expires_at": "2030-01-03T09:30:04.000000+00:00",
        "webhook_signing_secret": "whsec_C2FVsBQIhrscChlQwMTWQ6R7n1GKJ4z8Vh0yLq5Xb3E=",
    },
    "Subscriber": {
        "email": "ada@example.com",
        "phone": "+14155550100",
        "locale": "en-GB",
        "timezone": "Europe/London",
        "data": {"name": "Ada", "plan": "pro"},
    },
    "SubscriberImport": {
        "subscribers": [
            {"external_id": "u43", "email": "bo@example.com"},
            {"external_id": "u44", "email": "not-an-address"},
        ]
    },
    "Topic": {"description": "Everything said on Project Apollo's board.", "name": "Project Apollo"},
    "TopicOut": {
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "description": "Everything said on Project Apollo's board.",
        "key": "project-apollo",
        "name": "Project Apollo",
        "subscribers": 2,
        "updated_at": "2030-01-02T09:30:04.000000+00:00",
    },
    "TopicMembers": {"subscriber_ids": ["u42", "u43"]},
    "MembersAdded": {"added": 2},
    "MembersRemoved": {"removed": 1},
    "TopicMemberPage": {
        "items": [
            {"added_at": "2030-01-02T09:30:04.000000+00:00", "subscriber_id": "u42"},
            {"added_at": "2030-01-02T09:30:04.000000+00:00", "subscriber_id": "u43"},
        ],
        "next_cursor": None,
    },
    "SubscriberOut": {
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "data": {"name": "Ada", "plan": "pro"},
        "email": "ada@example.com",
        "external_id": "u42",
        "locale": "en-GB",
        "phone": "+14155550100",
        "push_tokens": [],
        "timezone": "Europe/London",
        "updated_at": "2030-01-02T09:30:04.000000+00:00",
    },
    "SubscriberProfile": {
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "data": {"name": "Ada", "plan": "pro"},
        "email": "ada@example.com",
        "external_id": "u42",
        "locale": "en-GB",
        "phone": "+14155550100",
        "push_tokens": [],
        "timezone": "Europe/London",
        "topics": ["project-apollo", "weekly-digest"],
        "updated_at": "2030-01-02T09:30:04.000000+00:00",
    },
    "SubscriberPage": {
        "items": [
            {
                "created_at": "2030-01-02T09:30:04.000000+00:00",
                "data": {"name": "Ada", "plan": "pro"},
                "email": "ada@example.com",
                "external_id": "u42",
                "locale": "en-GB",
                "phone": "+14155550100",
                "push_tokens": [],
                "timezone": "Europe/London",
                "updated_at": "2030-01-02T09:30:04.000000+00:00",
            }
        ],
        "next_cursor": None,
    },
    "PreferenceLink": {
        "expires_at": "2030-02-01T09:30:00+00:00",
        "url": "https://tidings.example/p/eyJwIjoiYWNtZSIsInMiOiJ1c2VyLTQyIiwieCI6MTg5ODQ0MzgwMH0.sig",
    },
    "PreferenceLinkRequest": {"expires_in": 604800},
    "SubscriberToken": {
        "expires_at": "2030-01-02T10:30:04+00:00",
        "token": "tsub_eyJwIjoiYWNtZSIsInMiOiJ1NDIiLCJ4IjoxODkzNTc1ODA0fQ.Qm9vX1ZqT2Fh",
    },
    "SubscriberTokenRequest": {"ttl_seconds": 3600},
    "Suppression": {
        "address": "bounced@example.com",
        "channel": "email",
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "expires_at": "2031-01-01T00:00:00+00:00",
        "reason": "manual",
        "updated_at": "2030-01-02T09:30:04.000000+00:00",
    },
    "SuppressionCreate": {
        "channel": "email",
        "address": "bounced@example.com",
        "reason": "manual",
        "expires_at": "2031-01-01T00:00:00Z",
    },
    "SuppressionPage": {
        "items": [
            {
                "address": "bounced@example.com",
                "channel": "email",
                "created_at": "2030-01-02T09:30:04.000000+00:00",
                "expires_at": "2031-01-01T00:00:00+00:00",
                "reason": "manual",
                "updated_at": "2030-01-02T09:30:04.000000+00:00",
            }
        ],
        "next_cursor": None,
    },
    "Template": {
        "channel": "email",
        "created_at": "2030-01-02T09:30:04.000000+00:00",
        "default_locale": "en",
        "from": None,
        "html": "<p>Hello {{ name }}, welcome to Acme.</p>",
        "key": "welcome",
        "locale": "en",
        "locales": ["en"],
        "reply_to": None,
        "subject": "Welcome, {{ name }}",
        "text": "Hello {{ name }}, welcome to Acme.",
        "tracking": None,
        "version": 1,
    },
    "TemplateCreate": {
        "key": "welcome",
        "channel": "email",
        "subject": "Welcome, {{ name }}",
        "text": "Hello {{ name }}, welcome to Acme.",
        "html": "<p>Hello {{ name }}, welcome to Acme.</p>",
    },
    "TemplatePage": {
        "items": [
            {
                "channel": "email",
                "created_at": "2030-01-02T09:30:04.000000+00:00",
                "default_locale": "en",
                "from": None,
                "html": "<p>Hello {{ name }}, welcome to Acme.</p>",
                "key": "welcome",
                "locale": "en",
                "locales": ["de", "en"],
                "reply_to": None,
                "subject": "Welcome, {{ name }}",
                "text": "Hello {{ name }}, welcome to Acme.",
                "tracking": None,
                "version": 2,
            }
        ],
        "next_cursor": None,
    },
    "TemplateUpdate": {
        "locale": "de",
        "subject": "Willkommen, {{ name }}",
        "text": "Hallo {{ name }}, willkommen bei Acme.",
    },
    "WebhookEndpoint": {
        "batch": False,
        "created_at": "2030-01-02T09:30:05.000000+00:00",
        "description": "Delivery events",
        "disabled_at": None,
        "disabled_reason": None,
        "enabled": True,
        "event_types": ["delivered", "bounced"],
        "failing_since": None,
        "id": "9e4d2c1b-6a7f-4e83-b5d0-3f8a1c6e7b25",
        "previous_secret_expires_at": None,
        "secret": "whsec_K7hV2pQ9mN4xB8cD1eF6gH3jL0sT5wY2zA9bC4dE7fG=",
        "updated_at": "2030-01-02T09:30:05.000000+00:00",
        "url": "https://hooks.acme.example/tidings",
    },
    "WebhookEndpointCreate": {
        "url": "https://hooks.acme.example/tidings",
        "description": "Delivery events",
        "event_types": ["delivered", "bounced"],
        "batch": False,
    },
    "WebhookEndpointPage": {
        "items": [
            {
                "batch": False,
                "created_at": "2030-01-02T09:30:05.000000+00:00",
                "description": "Delivery events",
                "disabled_at": None,
                "disabled_reason": None,
                "enabled": True,
                "event_types": ["delivered", "bounced", "complained"],
                "failing_since": None,
                "id": "9e4d2c1b-6a7f-4e83-b5d0-3f8a1c6e7b25",
                "previous_secret_expires_at": None,
                "updated_at": "2030-01-02T09:30:05.000000+00:00",
                "url": "https://hooks.acme.example/tidings",
            }
        ],
        "next_cursor": None,
    },
    "Workflow": {"name": "Comment alerts", "steps": WORKFLOW_STEPS},
    "WorkflowOut": {
        "created_at": "2030-01-02T09:30:05.000000+00:00",
        "key": "comment-alerts",
        "name": "Comment alerts",
        "steps": WORKFLOW_STEPS,
        "version": 2,
    },
    "Trigger": {
        "data": {"post": "Launch plan", "author": "Ada"},
        "recipients": ["u42", "u43"],
        "trigger_key": "post-17",
    },
    "TriggerAccepted": {"runs": 2, "trigger_id": "4c8e2a1f-9b3d-4e76-a5c0-1d7f3b9e2a48"},
    "Cancel": {"trigger_key": "post-17", "recipients": ["u42"]},
    "Cancelled": {"cancelled": 1},
    "WorkflowRun": {
        "created_at": "2030-01-02T09:30:05.000000+00:00",
        "data": {"author": "Ada", "count": 4, "items": [{"author": "Ada", "post_id": "p17"}], "post_id": "p17"},
        "due_at": None,
        "ended_at": "2030-01-02T10:40:06.000000+00:00",
        "id": "0193f2a4-7c1e-7d3a-9b2f-5e8c1a4d6b70",
        "reason": "a branch's condition did not hold",
        "status": "completed",
        "step": 4,
        "steps": [
            {
                "at": "2030-01-02T09:30:05.000000+00:00",
                "detail": {"key": ""},
                "kind": "throttle",
                "message_id": None,
                "message_status": None,
                "outcome": "passed",
                "step": 0,
            },
            {
                "at": "2030-01-02T09:40:05.000000+00:00",
                "detail": {"count": 4, "digest_id": "7d2e9c4a-1b3f-4a68-9e50-c8f1a2b3d4e5"},
                "kind": "digest",
                "message_id": None,
                "message_status": None,
                "outcome": "flushed",
                "step": 1,
            },
            {
                "at": "2030-01-02T09:40:05.000000+00:00",
                "detail": {"channel": "in_app"},
                "kind": "send",
                "message_id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
                "message_status": "sent",
                "outcome": "sent",
                "step": 2,
            },
            {
                "at": "2030-01-02T09:40:05.000000+00:00",
                "detail": {"until": "2030-01-02T10:40:05+00:00"},
                "kind": "delay",
                "message_id": None,
                "message_status": None,
                "outcome": "waited",
                "step": 3,
            },
            {
                "at": "2030-01-02T10:40:06.000000+00:00",
                "detail": None,
                "kind": "branch",
                "message_id": None,
                "message_status": None,
                "outcome": "stopped",
                "step": 4,
            },
        ],
        "subscriber_id": "u42",
        "test": False,
        "trigger_id": "4c8e2a1f-9b3d-4e76-a5c0-1d7f3b9e2a48",
        "trigger_key": "post-17",
        "updated_at": "2030-01-02T10:40:06.000000+00:00",
        "version": 2,
        "workflow": "comment-alerts",
    },
    "WebhookEndpointUpdate": {"event_types": ["delivered", "bounced", "complained"], "enabled": True},
}


def name_of(schema: Schema | type[Schema]) -> str:
    """The schema's component name, as apispec gives it: the class name less `Schema`."""
    cls = schema if isinstance(schema, type) else type(schema)
    return cls.__name__.removesuffix("Schema")


# An example of each path parameter, by its name in the route (`<message_id>`).
PATH_PARAMETERS: dict[str, str] = {
    "address": "ada@example.com",
    "batch_id": "c2a7e9d4-1f58-4b36-8e0a-7d3c5b9f2e14",
    "channel": "email",
    "delivery_id": "6a2f8c1d-4e9b-4b70-8d3a-2c5e7f9a1b36",
    "endpoint_id": "9e4d2c1b-6a7f-4e83-b5d0-3f8a1c6e7b25",
    "external_id": "u42",
    "key": "welcome",
    "key_id": "0f6c3e8a-2b9d-4c57-a1e4-6d7b8c9f0a12",
    "message_id": "5b1f0e6c-8a43-4c2e-9f7d-2d6a8e1c4b90",
    "name": "postmark",
    "project_id": "acme",
    "provider": "postmark",
    "subscriber_id": "u42",
    "token": "eyJwIjoiYWNtZSIsInMiOiJ1NDIiLCJjIjoxODkzNTc2NjA0LCJlIjoxODk0MTgxNDA0fQ.q3Vx1lJ0n8b1R2sT",
    "topic_key": "project-apollo",
    "run_id": "0193f2a4-7c1e-7d3a-9b2f-5e8c1a4d6b70",
    "workflow_key": "comment-alerts",
}


def of(schema: Schema | type[Schema]) -> Any:
    """The example of a schema (a list of one for `many=True`), or None when there is none."""
    example = EXAMPLES.get(name_of(schema))
    if example is None:
        return None
    return [example] if getattr(schema, "many", False) else example
