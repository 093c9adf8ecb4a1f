from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("workflows_app", "0004_failure_handled_and_workflow_retry")]

    operations = [
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(condition=models.Q(("status", "started"), ("timeout__isnull", False)),
                               fields=["started_at"], name="execution_started_timeout"),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(condition=models.Q(("status", "started")), fields=["id"], name="execution_started"),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(condition=models.Q(("type", "event_received")), fields=["execution", "id"],
                               name="event_received_execution"),
        ),
    ]
