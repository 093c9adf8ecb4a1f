from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("workflows_app", "0005_wakeup_scale")]

    operations = [
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["started_at"], name="execution_started_at"),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["ended_at"], name="execution_ended_at"),
        ),
    ]
