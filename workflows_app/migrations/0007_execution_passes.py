from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("workflows_app", "0006_history_scale")]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="passes",
            field=models.PositiveBigIntegerField(db_default=0, default=0, editable=False),
        ),
    ]
